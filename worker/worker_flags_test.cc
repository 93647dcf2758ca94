// What shardps-worker's flags build: the trainers' options (the evaluator,
// the straggler, the prefetch mode, prediction against delay compensation,
// the extra batches), --hidden, and the dense models' tables.
#include "worker/worker_flags.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/table_spec.h"

namespace shardps::worker {
namespace {

TEST(WorkerFlags, HiddenIsCommaSeparatedWidths) {
  std::vector<int> h;
  ASSERT_TRUE(ParseHidden("256,128", &h).ok());
  EXPECT_EQ(h, (std::vector<int>{256, 128}));
  ASSERT_TRUE(ParseHidden("64,,32,", &h).ok());  // empty items skipped
  EXPECT_EQ(h, (std::vector<int>{64, 32}));
  ASSERT_TRUE(ParseHidden("", &h).ok());
  EXPECT_TRUE(h.empty());
  for (const char* bad : {"0", "65537", "12x", "-3"}) {
    Status s = ParseHidden(std::string("8,") + bad, &h);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_EQ(s.message(), std::string("--hidden: '") + bad + "' is not a layer width in [1, 65536]");
  }
}

TEST(WorkerFlags, TheTrainerOptionsOfEachRank) {
  WorkerFlags f;
  f.loop.epochs = 3;
  f.loop.batch = 32;
  f.data.no_shuffle = true;
  f.model.seed = 9;
  f.eval.eval_rank = 1;
  f.eval.csv = "/tmp/x.csv";
  f.loop.slowdown = 2.5;
  f.loop.slow_rank = 1;
  f.loop.prefetch = "early";
  f.fill.fill_params = "at-hand";
  f.fill.fill_push = "with-next";
  const TrainerOptions r0 = ToTrainerOptions(f, 0), r1 = ToTrainerOptions(f, 1);
  EXPECT_EQ(r0.epochs, 3);
  EXPECT_EQ(r0.batch, 32);
  EXPECT_FALSE(r0.shuffle);
  EXPECT_EQ(r0.seed, 9u);
  EXPECT_FALSE(r0.evaluator);
  EXPECT_EQ(r0.csv, "");  // only the evaluator writes it
  EXPECT_TRUE(r1.evaluator);
  EXPECT_EQ(r1.csv, "/tmp/x.csv");
  EXPECT_EQ(r0.slowdown, 1.0);  // only --slow-rank is slowed down
  EXPECT_EQ(r1.slowdown, 2.5);
  EXPECT_EQ(r0.prefetch, TrainerOptions::PrefetchMode::kEarly);
  EXPECT_FALSE(r0.fill_fresh);
  EXPECT_FALSE(r0.fill_at_once);
  f.loop.slow_rank = -1;
  f.loop.prefetch = "late";
  EXPECT_EQ(ToTrainerOptions(f, 0).slowdown, 2.5);  // every worker
  EXPECT_EQ(ToTrainerOptions(f, 0).prefetch, TrainerOptions::PrefetchMode::kLate);
  f.loop.prefetch = "per-layer";
  EXPECT_EQ(ToTrainerOptions(f, 0).prefetch, TrainerOptions::PrefetchMode::kPerLayer);
}

TEST(WorkerFlags, DelayCompensationTurnsPredictionOffUnlessAskedFor) {
  WorkerFlags f;
  EXPECT_EQ(ToTrainerOptions(f, 0).predict, 2.0);
  f.model.staleness_rule = "dc";
  EXPECT_EQ(ToTrainerOptions(f, 0).predict, 0.0);
  f.loop.predict = 1.5;
  f.loop.predict_given = true;
  EXPECT_EQ(ToTrainerOptions(f, 0).predict, 1.5);
}

TEST(WorkerFlags, TheSparseOptions) {
  WorkerFlags f;
  f.model.optimizer = "adagrad";
  f.model.lr = 0.1f;
  f.model.seed = 5;
  f.sparse.examples = 40000;
  f.sparse.id_space = 100000;
  f.sparse.ids_per_example = 7;
  f.eval.csv = "c.csv";
  SparseLrOptions so;
  ASSERT_TRUE(ToSparseOptions(f, true, &so).ok());
  EXPECT_EQ(so.optimizer, OptimizerKind::kAdagrad);
  EXPECT_EQ(so.lr, 0.1f);
  EXPECT_EQ(so.clicks.seed, 5u);  // the click log follows --seed
  EXPECT_EQ(so.clicks.id_space, 100000u);
  EXPECT_EQ(so.clicks.ids_per_example, 7);
  EXPECT_EQ(so.examples, 40000u);
  EXPECT_EQ(so.csv, "c.csv");
  ASSERT_TRUE(ToSparseOptions(f, false, &so).ok());
  EXPECT_EQ(so.csv, "");
  f.model.optimizer = "rmsprop";
  EXPECT_FALSE(ToSparseOptions(f, true, &so).ok());
}

TEST(WorkerFlags, TheDenseTablesArePerLayerWeightsAndBias) {
  ModelFlags m;
  m.model = "mlp";
  m.seed = 3;
  m.lr = 0.01f;
  m.staleness_rule = "dc";
  m.dc_lambda = 0.1f;
  std::vector<TableSpec> w, b;
  ASSERT_TRUE(MlpTableSpecs(m, {784, 256, 10}, &w, &b).ok());
  ASSERT_EQ(w.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  const StalenessRule dc = StalenessRule::kDelayCompensation;
  const TableSpec w0 = testing::Dense("mlp.w0", 784, 256).Normal(0, std::sqrt(2.0f / 784)).Seed(300).Adam(0.01f).Rule(dc, 0.1f);
  // The bias is the weights' spec with zeros (init_b, which zeros ignore, kept).
  const TableSpec b0 =
      testing::Dense("mlp.b0", 1, 256).Init(InitKind::kZeros, 0, std::sqrt(2.0f / 784)).Seed(300).Adam(0.01f).Rule(dc, 0.1f);
  // The last layer feeds the softmax: no ReLU, no He factor 2.
  const TableSpec w1 = testing::Dense("mlp.w1", 256, 10).Normal(0, std::sqrt(1.0f / 256)).Seed(301).Adam(0.01f).Rule(dc, 0.1f);
  EXPECT_TRUE(w[0].SameShape(w0));
  EXPECT_TRUE(b[0].SameShape(b0));
  EXPECT_TRUE(w[1].SameShape(w1));
  EXPECT_EQ(b[1].name, "mlp.b1");
  m.optimizer = "nope";
  EXPECT_FALSE(MlpTableSpecs(m, {784, 10}, &w, &b).ok());
  m.optimizer = "adam";
  m.staleness_rule = "nope";
  EXPECT_FALSE(MlpTableSpecs(m, {784, 10}, &w, &b).ok());
}

// --wire-dtype and --compress: unset, the tables' defaults; set, on every
// dense table (weights and biases); a malformed --compress is refused.
TEST(WorkerFlags, WireTypeAndCompressionGoToEveryDenseTable) {
  ModelFlags m;
  std::vector<TableSpec> w, b;
  ASSERT_TRUE(MlpTableSpecs(m, {784, 256, 10}, &w, &b).ok());
  EXPECT_EQ(w[0].wire.dtype, DType::kF32);
  EXPECT_EQ(b[1].wire.compress, Compression::kNone);
  m.wire_dtype = "bf16";
  m.compress = "topk:0.05";
  ASSERT_TRUE(MlpTableSpecs(m, {784, 256, 10}, &w, &b).ok());
  for (const auto* v : {&w, &b})
    for (const TableSpec& t : *v) {
      EXPECT_EQ(t.wire.dtype, DType::kBF16) << t.name;
      EXPECT_EQ(t.wire.compress, Compression::kTopK) << t.name;
      EXPECT_FLOAT_EQ(t.wire.topk_fraction, 0.05f) << t.name;
    }
  m.compress = "sign";
  ASSERT_TRUE(MlpTableSpecs(m, {784, 10}, &w, &b).ok());
  EXPECT_EQ(w[0].wire.compress, Compression::kSign);
  for (const char* bad : {"topk:0", "topk:1.5", "sign:0.1", "zip", "topk:x"}) {
    m.compress = bad;
    const Status s = MlpTableSpecs(m, {784, 10}, &w, &b);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--compress"), std::string::npos) << s.ToString();
  }
}

TEST(WorkerFlags, DlrmOptionsAndTheirRefusals) {
  WorkerFlags f;
  f.model.model = "dlrm";
  f.model.optimizer = "adagrad";
  f.model.lr = 0.05f;
  DlrmTrainOptions o;
  Status s = ToDlrmOptions(f, false, &o);
  EXPECT_NE(s.message().find("needs --train-tsv"), std::string::npos) << s.ToString();
  f.dlrm.train_tsv = "train.tsv";
  s = ToDlrmOptions(f, true, &o);
  EXPECT_NE(s.message().find("evaluating worker needs --test-tsv"), std::string::npos) << s.ToString();
  f.dlrm.test_tsv = "test.tsv";
  f.dlrm.dim = 8;
  f.dlrm.bottom = "32";
  f.dlrm.top = "64,16";
  f.dlrm.emb_dtype = "bf16";
  f.dlrm.admit_after = 2;
  f.dlrm.evict_after_clocks = 100;
  f.dlrm.emb_max_rows = 1000;
  f.dlrm.hash_rows = 1 << 16;
  ASSERT_TRUE(ToDlrmOptions(f, true, &o).ok());
  EXPECT_EQ(o.model.dim, 8);
  EXPECT_EQ(o.model.bottom_hidden, std::vector<int>{32});
  EXPECT_EQ(o.model.top_hidden, (std::vector<int>{64, 16}));
  EXPECT_EQ(o.optimizer, OptimizerKind::kAdagrad);
  EXPECT_EQ(o.hash_rows, 1u << 16);
  const std::vector<TableSpec> specs = DlrmTableSpecs(o);
  ASSERT_EQ(specs.size(), 1u + 2 * 2 + 2 * 3);  // embeddings, 2 bottom layers, 3 top layers
  EXPECT_EQ(specs[0].name, "dlrm.emb");
  EXPECT_EQ(specs[0].cols, 8u);
  EXPECT_EQ(specs[0].dtype, DType::kBF16);
  EXPECT_EQ(specs[0].admit_after, 2u);
  EXPECT_EQ(specs[0].evict_after_clocks, 100u);
  EXPECT_EQ(specs[0].max_rows, 1000u);
  EXPECT_EQ(specs[1].name, "dlrm.bottom.w0");
  EXPECT_EQ(specs[1].rows, 13u);
  EXPECT_EQ(specs[1].cols, 32u);
  EXPECT_EQ(specs.back().name, "dlrm.top.b2");
  f.dlrm.hash_rows = 1;
  EXPECT_NE(ToDlrmOptions(f, true, &o).message().find("--hash-rows must be 0"), std::string::npos);
  f.dlrm.hash_rows = 0;
  f.dlrm.top = "64,x";
  EXPECT_NE(ToDlrmOptions(f, true, &o).message().find("--top: 'x'"), std::string::npos);
  f.dlrm.top = "64";
  f.dlrm.evict_after_sec = 10;  // both eviction rules
  EXPECT_NE(ToDlrmOptions(f, true, &o).message().find("give one of them"), std::string::npos);
}

}  // namespace
}  // namespace shardps::worker
