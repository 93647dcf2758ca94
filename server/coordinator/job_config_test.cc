#include "server/coordinator/job_config.h"

#include <gtest/gtest.h>

namespace shardps {
namespace {

TEST(JobConfig, ParsesJobAndTables) {
  CoordinatorOptions o;
  Status s = ParseJobConfig(R"(
[job]
servers = 3
workers = 2
consistency = "bounded"
staleness = 2

[[table]]
name = "w"
rows = 3000
cols = 8
init = "uniform"
low = -0.5
high = 0.5
optimizer = "adam"
lr = 0.01
staleness_rule = "dc"
dc_lambda = 0.5

[[table]]
name = "emb"
kind = "sparse"
cols = 16
init = "normal"
stddev = 0.1
optimizer = "adagrad"
)", "job.toml", &o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(o.num_servers, 3u);
  EXPECT_EQ(o.num_workers, 2u);
  EXPECT_EQ(o.consistency, Consistency::kBounded);
  EXPECT_EQ(o.staleness, 2u);
  ASSERT_EQ(o.tables.size(), 2u);
  EXPECT_EQ(o.tables[0].rows, 3000u);
  EXPECT_EQ(o.tables[0].init, InitKind::kUniform);
  EXPECT_FLOAT_EQ(o.tables[0].init_a, -0.5f);
  EXPECT_EQ(o.tables[0].optimizer, OptimizerKind::kAdam);
  EXPECT_EQ(o.tables[0].staleness_rule, StalenessRule::kDelayCompensation);
  EXPECT_FLOAT_EQ(o.tables[0].dc_lambda, 0.5f);
  EXPECT_EQ(o.tables[1].staleness_rule, StalenessRule::kDefault);
  EXPECT_EQ(o.tables[1].kind, TableKind::kSparse);
  EXPECT_FLOAT_EQ(o.tables[1].init_b, 0.1f);
  EXPECT_TRUE(o.Validate().ok());
  // The wire options: float32 and uncompressed unless the table says.
  EXPECT_EQ(o.tables[0].wire.dtype, DType::kF32);
  EXPECT_EQ(o.tables[0].wire.compress, Compression::kNone);
}

TEST(JobConfig, ADenseTablesWireOptionsAreItsClientsDefaults) {
  CoordinatorOptions o;
  Status s = ParseJobConfig(R"(
[[table]]
name = "w"
rows = 100
cols = 4
wire_dtype = "bf16"
compress = "topk"
topk_fraction = 0.05
)", "job.toml", &o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(o.tables.size(), 1u);
  EXPECT_EQ(o.tables[0].wire.dtype, DType::kBF16);
  EXPECT_EQ(o.tables[0].wire.compress, Compression::kTopK);
  EXPECT_FLOAT_EQ(o.tables[0].wire.topk_fraction, 0.05f);
}

TEST(JobConfig, ErrorsNameTheProblem) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"[job]\nservers = 0\n", "servers"},
      {"[job]\nconsistency = \"eventual\"\n", "eventual"},
      {"[job]\nwokers = 2\n", "wokers"},
      {"[[table]]\nrows = 3\n", "no name"},
      {"[[table]]\nname = \"w\"\nrows = 0\n", "rows > 0"},
      {"[[table]]\nname = \"w\"\nrows = 4\noptimizer = \"lbfgs\"\n", "lbfgs"},
      {"[[table]]\nname = \"w\"\nrows = 4\nstaleness_rule = \"1/t\"\n", "unknown staleness rule '1/t' (valid: default, none, scale-lr, dc)"},
      {"[[table]]\nname = \"w\"\nrows = 4\ndc_lambda = -1.0\n", "dc_lambda must be finite and >= 0"},
      {"[[table]]\nname = \"w\"\nrows = 4\ncols = \"x\"\n", "cols"},
      {"[job\n", "job.toml:"},
      {"[[table]]\nname = \"w\"\nrows = 4\nwire_dtype = \"f8\"\n", "unknown dtype 'f8' (valid: f32, bf16, f16)"},
      {"[[table]]\nname = \"w\"\nrows = 4\ncompress = \"zip\"\n", "unknown compression 'zip' (valid: none, topk, sign)"},
      {"[[table]]\nname = \"w\"\nrows = 4\ncompress = \"topk\"\ntopk_fraction = 0.0\n", "topk_fraction must be in (0, 1]"},
      {"[[table]]\nname = \"e\"\nkind = \"sparse\"\nwire_dtype = \"bf16\"\n", "wire_dtype is for dense tables"},
      {"[[table]]\nname = \"w\"\nrows = 4\ncompress = \"sign\"\nstaleness_rule = \"dc\"\n", "do not combine"},
      {"[job]\ngroups = -1\n", "groups"},
      {"[security]\nenabled = \"yes\"\n", "'enabled' must be true or false"},
      {"[security]\nenabled = false\nkeys = \"/k\"\n", "enabled = false with keys = '/k'"},
  };
  for (const auto& c : cases) {
    CoordinatorOptions o;
    Status s = ParseJobConfig(c.text, "job.toml", &o);
    EXPECT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
  }
}

TEST(JobConfig, ValidateRejectsDuplicateTablesAndBadShapes) {
  CoordinatorOptions o;
  TableSpec t;
  t.name = "w";
  t.rows = 4;
  o.tables = {t, t};
  EXPECT_EQ(o.Validate().code(), Code::kInvalidArgument);
  o.tables = {t};
  o.num_servers = 8;
  o.partitions = 4;
  EXPECT_EQ(o.Validate().code(), Code::kInvalidArgument);
  o.partitions = 64;
  o.consistency = Consistency::kSync;
  o.staleness = 3;
  EXPECT_EQ(o.Validate().code(), Code::kInvalidArgument);
  o.staleness = 0;
  o.replicas = 9;  // more copies than servers
  EXPECT_EQ(o.Validate().code(), Code::kInvalidArgument);
  o.replicas = 3;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
  o.groups = 4;  // fewer groups than servers
  EXPECT_NE(o.Validate().message().find("groups must be 0 (= servers) or in [servers, partitions], got 4"),
            std::string::npos) << o.Validate().ToString();
  o.groups = 65;  // more than partitions
  EXPECT_EQ(o.Validate().code(), Code::kInvalidArgument);
  o.groups = 32;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
  EXPECT_EQ(o.Groups(), 32u);
  o.groups = 0;
  EXPECT_EQ(o.Groups(), 8u);
  o.replicas = 2;
  o.tables[0].kind = TableKind::kSparse;
  o.tables[0].rows = 0;
  o.tables[0].evict_after_clocks = 100;  // the copies would evict on their own clocks
  Status s = o.Validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not supported with replicas = 2"), std::string::npos) << s.ToString();
  o.replicas = 1;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
}

// [security] enabled: unset (the launcher decides by where the job runs),
// true or false; --set overrides the job file, and the launcher reads it
// back from --print-config.
TEST(JobConfig, TheCoordinatorsStoreIsEtcdAndOneOfTwoPlaces) {
  CoordinatorOptions o;
  Status s = ParseJobConfig("[coordinator]\nstore = \"etcd://10.0.0.1:2379,10.0.0.2:2379/jobs/a\"\n", "job.toml", &o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(o.state_dir, "etcd://10.0.0.1:2379,10.0.0.2:2379/jobs/a");
  CoordinatorOptions bad;
  s = ParseJobConfig("[coordinator]\nstore = \"/var/state\"\n", "job.toml", &bad);
  EXPECT_NE(s.message().find("job.toml:2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("is not etcd://"), std::string::npos) << s.message();
  s = ParseJobConfig("[job]\nstate_dir = \"/var/state\"\n[coordinator]\nstore = \"etcd://h:1/p\"\n", "job.toml", &bad);
  EXPECT_NE(s.message().find("both given"), std::string::npos) << s.message();
  s = ParseJobConfig("[coordinator]\nstandbys = 2\n", "job.toml", &bad);
  EXPECT_NE(s.message().find("standbys need the job's state in etcd"), std::string::npos) << s.message();
}

// Standbys: with [coordinator] store or [launch] etcd (the launcher's
// cluster, "local", or one given as HOST:PORT,...); the launcher reads
// both back from --print-config.
TEST(JobConfig, StandbysNeedEtcdAndTheLauncherReadsThemBack) {
  JobConfig c;
  Status s = ParseJobConfig("[coordinator]\nstandbys = 2\n[launch]\netcd = \"local\"\n", "job.toml", {}, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.coordinator.standbys, 2u);
  EXPECT_EQ(c.launch.etcd, "local");
  const std::string json = JobConfigJson(c);
  EXPECT_NE(json.find("\"coordinator\": {\"store\": \"\", \"standbys\": 2}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"etcd\": \"local\""), std::string::npos) << json;
  JobConfig given;
  ASSERT_TRUE(ParseJobConfig("", "job.toml", {"launch.etcd=10.0.0.1:2379,10.0.0.2:2379", "coordinator.standbys=1"},
                             &given).ok());
  EXPECT_EQ(given.coordinator.standbys, 1u);
  JobConfig bad;
  s = ParseJobConfig("[launch]\netcd = \"10.0.0.1\"\n", "job.toml", {}, &bad);
  EXPECT_NE(s.message().find("job.toml:2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("is not \"local\" or HOST:PORT"), std::string::npos) << s.message();
  s = ParseJobConfig("[job]\nstate_dir = \"/var/s\"\n[launch]\netcd = \"local\"\n", "job.toml", {}, &bad);
  EXPECT_NE(s.message().find("both given"), std::string::npos) << s.message();
  JobConfig both;
  s = ParseJobConfig("[coordinator]\nstore = \"etcd://h:1/p\"\n[launch]\netcd = \"local\"\n", "job.toml", {}, &both);
  EXPECT_NE(s.message().find("[coordinator] store and [launch] etcd both given"), std::string::npos) << s.message();
  // (what the launcher hands its coordinators: its etcd as the store, [launch] etcd cleared)
  JobConfig handed;
  s = ParseJobConfig("[launch]\netcd = \"local\"\n", "job.toml", {"launch.etcd=\"\"", "coordinator.store=etcd://h:1/p"},
                     &handed);
  EXPECT_TRUE(s.ok()) << s.ToString();
  JobConfig many;
  s = ParseJobConfig("[coordinator]\nstandbys = 9\n[launch]\netcd = \"local\"\n", "job.toml", {}, &many);
  EXPECT_NE(s.message().find("standbys"), std::string::npos) << s.message();
}

TEST(JobConfig, SecurityEnabledIsUnsetTrueOrFalse) {
  JobConfig c;
  ASSERT_TRUE(ParseJobConfig("[security]\nkeys = \"/k\"\n", "job.toml", {}, &c).ok());
  EXPECT_FALSE(c.security.enabled.has_value());
  EXPECT_NE(JobConfigJson(c).find("\"security\": {\"keys\": \"/k\", \"enabled\": null}"), std::string::npos)
      << JobConfigJson(c);
  JobConfig off;
  ASSERT_TRUE(ParseJobConfig("[security]\nenabled = true\n", "job.toml", {"security.enabled=false"}, &off).ok());
  ASSERT_TRUE(off.security.enabled.has_value());
  EXPECT_FALSE(*off.security.enabled);
  EXPECT_NE(JobConfigJson(off).find("\"enabled\": false"), std::string::npos);
}

TEST(JobConfig, MissingFileIsAClearError) {
  CoordinatorOptions o;
  Status s = LoadJobConfig("/nonexistent/job.toml", &o);
  EXPECT_NE(s.message().find("/nonexistent/job.toml"), std::string::npos);
}

// Found by fuzzing (tests/fuzz/crashes/job_config/): a float where an
// integer belongs was converted before the type was checked, undefined
// for one out of int64's range (UBSan: "7e+84 is outside the range of
// representable values of type 'long'"). Refused as not an integer.
TEST(JobConfig, HugeFloatForAnIntegerIsRefused) {
  for (const char* text : {"[job]\nservers = 7e84\n", "[job]\nworkers = -1e300\n", "[job]\nservers = 2.0\n",
                           "[[table]]\nname = \"w\"\nrows = 1e30\ncols = 2\n"}) {
    CoordinatorOptions o;
    Status s = ParseJobConfig(text, "job.toml", &o);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << text;
    EXPECT_NE(s.message().find("must be an integer"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace shardps
