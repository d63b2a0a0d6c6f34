#include "batch/batch_plan.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace strata::batch {
namespace {

// Prompts built from parts: each part a run of distinct tokens, so that prompts share
// exactly the parts they have in common.
class Prompts {
 public:
  std::vector<int32_t> Part(int length) {
    std::vector<int32_t> p(static_cast<size_t>(length));
    for (int32_t& t : p) t = next_++;
    return p;
  }
  void Add(std::initializer_list<const std::vector<int32_t>*> parts, int64_t max_new_tokens = 16) {
    std::vector<int32_t> tokens;
    for (const auto* p : parts) tokens.insert(tokens.end(), p->begin(), p->end());
    tokens_.push_back(std::move(tokens));
    max_new_.push_back(max_new_tokens);
  }
  std::vector<PlanPrompt> View() const {
    std::vector<PlanPrompt> out;
    for (size_t i = 0; i < tokens_.size(); ++i) out.push_back({tokens_[i], max_new_[i]});
    return out;
  }
  const std::vector<int32_t>& tokens(int i) const { return tokens_[static_cast<size_t>(i)]; }
  size_t size() const { return tokens_.size(); }

 private:
  int32_t next_ = 1;
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<int64_t> max_new_;
};

// What every plan must be: each prompt in one group, each group's prefix a real common
// prefix shorter than every member, whole multiples of the granularity, and the counts
// adding up.
void CheckPlan(const Plan& plan, const std::vector<PlanPrompt>& prompts, const PlanOptions& options) {
  std::multiset<int> seen;
  int64_t computed = 0, total = 0;
  for (const PlanPrompt& p : prompts) total += static_cast<int64_t>(p.tokens.size());
  for (const PlanGroup& g : plan.groups) {
    ASSERT_FALSE(g.members.empty());
    computed += g.prefix_tokens;
    if (g.prefix_tokens > 0) {
      EXPECT_GE(g.prefix_tokens, options.min_prefix_tokens);
      EXPECT_EQ(g.prefix_tokens % options.granularity, 0);
    }
    const auto& first = prompts[static_cast<size_t>(g.members.front())].tokens;
    for (int m : g.members) {
      seen.insert(m);
      const auto& t = prompts[static_cast<size_t>(m)].tokens;
      ASSERT_LT(g.prefix_tokens, static_cast<int64_t>(t.size()));
      EXPECT_TRUE(std::equal(t.begin(), t.begin() + g.prefix_tokens, first.begin())) << "member " << m;
      computed += static_cast<int64_t>(t.size()) - g.prefix_tokens;
    }
  }
  ASSERT_EQ(seen.size(), prompts.size());
  for (int i = 0; i < static_cast<int>(prompts.size()); ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  EXPECT_EQ(plan.prompt_tokens, total);
  EXPECT_EQ(plan.computed_tokens, computed);
  EXPECT_LE(plan.ideal_computed_tokens, plan.computed_tokens);
}

TEST(BatchPlanTest, TwoLevelSharingGroupsByDocumentBehindTheSystemPrompt) {
  // A system prompt, then one of 4 documents, then one of 8 questions per document.
  Prompts p;
  const auto system = p.Part(64);
  std::vector<std::vector<int32_t>> docs, questions;
  for (int d = 0; d < 4; ++d) docs.push_back(p.Part(200));
  for (int d = 0; d < 4; ++d) {
    for (int q = 0; q < 8; ++q) {
      questions.push_back(p.Part(20));
      p.Add({&system, &docs[static_cast<size_t>(d)], &questions.back()});
    }
  }
  const auto prompts = p.View();
  const PlanOptions options;
  const Plan plan = MakePlan(prompts, options);
  CheckPlan(plan, prompts, options);
  // One group per document, each sharing the system prompt and the document.
  ASSERT_EQ(plan.groups.size(), 4u);
  for (const PlanGroup& g : plan.groups) {
    EXPECT_EQ(g.prefix_tokens, 264);
    EXPECT_EQ(g.members.size(), 8u);
  }
  EXPECT_EQ(plan.prompt_tokens, 32 * 284);
  EXPECT_EQ(plan.computed_tokens, 4 * 264 + 32 * 20);
  // The ideal computes the system prompt once, not once per document.
  EXPECT_EQ(plan.ideal_computed_tokens, 64 + 4 * 200 + 32 * 20);

  // Plain prefix reuse shares only what all prompts share.
  const Plan first = MakePlan(prompts, PlanOptions{.planning = Planning::kFirstLevel});
  CheckPlan(first, prompts, options);
  ASSERT_EQ(first.groups.size(), 1u);
  EXPECT_EQ(first.groups[0].prefix_tokens, 64);
  EXPECT_EQ(first.computed_tokens, 64 + 32 * 220);
  EXPECT_GT(plan.saving_ratio(), first.saving_ratio());

  const Plan none = MakePlan(prompts, PlanOptions{.planning = Planning::kNone});
  CheckPlan(none, prompts, options);
  EXPECT_EQ(none.computed_tokens, none.prompt_tokens);
  EXPECT_EQ(none.saving_ratio(), 0.0);
}

TEST(BatchPlanTest, ThreeLevelSharingPicksTheLevelThatSavesMost) {
  // System (32), document (100), section (300), question (10). Each document has 2
  // sections of 6 questions: sharing down to the section saves more than the document.
  Prompts p;
  const auto system = p.Part(32);
  for (int d = 0; d < 3; ++d) {
    const auto doc = p.Part(100);
    for (int s = 0; s < 2; ++s) {
      const auto section = p.Part(300);
      for (int q = 0; q < 6; ++q) {
        const auto question = p.Part(10);
        p.Add({&system, &doc, &section, &question});
      }
    }
  }
  const auto prompts = p.View();
  const Plan plan = MakePlan(prompts, PlanOptions{});
  CheckPlan(plan, prompts, PlanOptions{});
  ASSERT_EQ(plan.groups.size(), 6u);
  for (const PlanGroup& g : plan.groups) EXPECT_EQ(g.prefix_tokens, 432);

  // With 2 questions per section and 10 sections under one document the sections still
  // win: 10 sections of (2-1)·432 = 4320 against (20-1)·132 = 2508 at the document.
  Prompts q;
  const auto sys2 = q.Part(32);
  const auto doc2 = q.Part(100);
  for (int s = 0; s < 10; ++s) {
    const auto section = q.Part(300);
    for (int k = 0; k < 2; ++k) {
      const auto question = q.Part(10);
      q.Add({&sys2, &doc2, &section, &question});
    }
  }
  const auto prompts2 = q.View();
  const Plan plan2 = MakePlan(prompts2, PlanOptions{});
  CheckPlan(plan2, prompts2, PlanOptions{});
  ASSERT_EQ(plan2.groups.size(), 10u);
  for (const PlanGroup& g : plan2.groups) EXPECT_EQ(g.prefix_tokens, 432);
}

TEST(BatchPlanTest, EnlargementStopsWhereChildrenShareTooLittle) {
  // 12 prompts share a 500-token prefix; below it, 6 pairs share 20 more tokens. Sharing
  // the 500 across all 12 (11·500) beats 6 groups of 520 (6·520).
  Prompts p;
  const auto common = p.Part(500);
  for (int pair = 0; pair < 6; ++pair) {
    const auto mid = p.Part(20);
    for (int k = 0; k < 2; ++k) {
      const auto tail = p.Part(5);
      p.Add({&common, &mid, &tail});
    }
  }
  const auto prompts = p.View();
  const Plan plan = MakePlan(prompts, PlanOptions{});
  CheckPlan(plan, prompts, PlanOptions{});
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].prefix_tokens, 500);
}

TEST(BatchPlanTest, PrefixesAreWholePagesAndShortOnesAreNotShared) {
  Prompts p;
  const auto common = p.Part(70);
  const auto shortish = p.Part(10);
  for (int k = 0; k < 4; ++k) {
    const auto tail = p.Part(8);
    p.Add({&common, &tail});
  }
  for (int k = 0; k < 4; ++k) {
    const auto tail = p.Part(8);
    p.Add({&shortish, &tail});
  }
  const auto prompts = p.View();
  const PlanOptions options{.granularity = 16, .min_prefix_tokens = 16};
  const Plan plan = MakePlan(prompts, options);
  CheckPlan(plan, prompts, options);
  ASSERT_EQ(plan.groups.size(), 2u);
  std::vector<int64_t> prefixes;
  for (const PlanGroup& g : plan.groups) prefixes.push_back(g.prefix_tokens);
  std::sort(prefixes.begin(), prefixes.end());
  EXPECT_EQ(prefixes, (std::vector<int64_t>{0, 64}));  // 70 rounds down to 64; 10 is too short
}

TEST(BatchPlanTest, DecodeHeavyGroupsRunFirst) {
  Prompts p;
  const auto a = p.Part(100), b = p.Part(100);
  for (int k = 0; k < 3; ++k) {
    const auto t = p.Part(10);
    p.Add({&a, &t}, /*max_new_tokens=*/4);
  }
  for (int k = 0; k < 3; ++k) {
    const auto t = p.Part(10);
    p.Add({&b, &t}, /*max_new_tokens=*/k == 1 ? 400 : 200);
  }
  const auto prompts = p.View();
  const Plan plan = MakePlan(prompts, PlanOptions{});
  CheckPlan(plan, prompts, PlanOptions{});
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].members, (std::vector<int>{4, 3, 5}));  // b's, the 400-token one first
  EXPECT_EQ(plan.groups[1].members, (std::vector<int>{0, 1, 2}));
  // Plain prefix reuse keeps the input order.
  const Plan first = MakePlan(prompts, PlanOptions{.planning = Planning::kFirstLevel});
  ASSERT_EQ(first.groups.size(), 2u);
  EXPECT_EQ(first.groups[0].members, (std::vector<int>{0, 1, 2}));
}

TEST(BatchPlanTest, EqualPromptsShortPromptsAndEmptyBatches) {
  EXPECT_TRUE(MakePlan({}, PlanOptions{}).groups.empty());
  Prompts p;
  const auto long_part = p.Part(40), one = p.Part(1);
  for (int k = 0; k < 3; ++k) p.Add({&long_part});
  p.Add({&one});
  const auto prompts = p.View();
  const Plan plan = MakePlan(prompts, PlanOptions{});
  CheckPlan(plan, prompts, PlanOptions{});
  // The equal prompts share all but their last token; the 1-token prompt runs alone.
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.computed_tokens, 39 + 3 + 1);
  EXPECT_EQ(plan.ideal_computed_tokens, 39 + 4);
}

// On random trees the DP is never worse than plain prefix reuse (one of the cuts it
// considers), never better than the ideal, and every plan is well formed.
TEST(BatchPlanTest, RandomBatchesKeepTheInvariants) {
  std::mt19937 rng(20261124);
  for (int trial = 0; trial < 200; ++trial) {
    Prompts p;
    std::vector<std::vector<int32_t>> level1, level2;
    const int n1 = 1 + static_cast<int>(rng() % 3), n2 = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n1; ++i) level1.push_back(p.Part(1 + static_cast<int>(rng() % 80)));
    for (int i = 0; i < n2; ++i) level2.push_back(p.Part(1 + static_cast<int>(rng() % 120)));
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const auto tail = p.Part(static_cast<int>(rng() % 30));
      const auto& a = level1[rng() % level1.size()];
      const auto& b = level2[rng() % level2.size()];
      switch (rng() % 3) {
        case 0: p.Add({&a, &b, &tail}, 1 + rng() % 100); break;
        case 1: p.Add({&a, &tail, &b}, 1 + rng() % 100); break;
        default: p.Add({&a, &b}, 1 + rng() % 100); break;
      }
    }
    const auto prompts = p.View();
    const PlanOptions options{.granularity = 1 + static_cast<int64_t>(rng() % 16),
                              .min_prefix_tokens = static_cast<int64_t>(rng() % 32)};
    PlanOptions first_options = options;
    first_options.planning = Planning::kFirstLevel;
    const Plan global = MakePlan(prompts, options);
    const Plan first = MakePlan(prompts, first_options);
    SCOPED_TRACE(trial);
    CheckPlan(global, prompts, options);
    CheckPlan(first, prompts, first_options);
    EXPECT_LE(global.computed_tokens, first.computed_tokens);
    EXPECT_GE(global.saving_ratio(), 0.0);
    EXPECT_EQ(MakePlan(prompts, options).groups.size(), global.groups.size());  // deterministic
  }
}

}  // namespace
}  // namespace strata::batch
