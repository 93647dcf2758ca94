// shardps/export.h: what the client library's public headers need from the
// compiler. Included by every public header; nothing here to call.
#pragma once

// libshardps.so is built with -fvisibility=hidden and a version script: only
// what is marked SHARDPS_EXPORT (the public API, all in namespace shardps)
// is exported. For a static link the attribute changes nothing.
#if defined(__GNUC__) || defined(__clang__)
#define SHARDPS_EXPORT [[gnu::visibility("default")]]
#else
#define SHARDPS_EXPORT
#endif
