#include "batch/batch_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace strata::batch {
namespace {

// A node of the compressed prefix tree: the prompts under it all start with the first
// `depth` tokens of prompt `rep`. The tree is built over each prompt but its last token
// (always computed per prompt), so a node's depth is always a shareable prefix.
struct Node {
  int64_t depth = 0;
  int rep = -1;
  std::vector<int> children;
  std::vector<int> ends;  // prompts whose shareable part ends here
  int64_t n = 0;          // prompts under it (ends included)
  int64_t best = 0;       // the most prompt tokens its subtree can save (the DP)
  bool group = false;     // the DP's choice: its prompts share this node
};

class Planner {
 public:
  Planner(absl::Span<const PlanPrompt> prompts, const PlanOptions& options) : prompts_(prompts), options_(options) {}

  Plan Run() {
    for (const PlanPrompt& p : prompts_) plan_.prompt_tokens += static_cast<int64_t>(p.tokens.size());
    BuildTree();
    plan_.ideal_computed_tokens = static_cast<int64_t>(prompts_.size());
    for (size_t v = 1; v < nodes_.size(); ++v) plan_.ideal_computed_tokens += nodes_[v].depth - parent_depth_[v];
    switch (options_.planning) {
      case Planning::kGlobal:
        Choose();
        Assign();
        OrderByDecodeRatio();
        break;
      case Planning::kFirstLevel: FirstLevel(); break;
      case Planning::kNone: {
        PlanGroup all;
        all.members.resize(prompts_.size());
        std::iota(all.members.begin(), all.members.end(), 0);
        plan_.groups.push_back(std::move(all));
        break;
      }
    }
    std::erase_if(plan_.groups, [](const PlanGroup& g) { return g.members.empty(); });
    for (const PlanGroup& g : plan_.groups) {
      plan_.computed_tokens += g.prefix_tokens;
      for (int m : g.members) plan_.computed_tokens += Length(m) - g.prefix_tokens;
    }
    return std::move(plan_);
  }

 private:
  int64_t Length(int i) const { return static_cast<int64_t>(prompts_[static_cast<size_t>(i)].tokens.size()); }
  absl::Span<const int32_t> Shareable(int i) const {
    return prompts_[static_cast<size_t>(i)].tokens.subspan(0, static_cast<size_t>(Length(i) - 1));
  }
  // A depth as the backend can share it; 0 when too short to be worth a group.
  int64_t Usable(int64_t depth) const {
    const int64_t g = std::max<int64_t>(1, options_.granularity);
    const int64_t d = depth / g * g;
    return d >= std::max<int64_t>(1, options_.min_prefix_tokens) ? d : 0;
  }

  int NewNode(int64_t depth, int rep) {
    nodes_.push_back(Node{.depth = depth, .rep = rep});
    return static_cast<int>(nodes_.size()) - 1;
  }

  // The compressed tree from the prompts in lexicographic order: neighbours' longest
  // common prefixes give the branch points (a stack holds the path to the last prompt).
  void BuildTree() {
    std::vector<int> order(prompts_.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [this](int a, int b) {
      const auto x = Shareable(a), y = Shareable(b);
      return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
    });
    NewNode(0, order.empty() ? -1 : order.front());
    std::vector<int> stack = {0};
    int prev = -1;
    for (int i : order) {
      int64_t lcp = 0;
      if (prev >= 0) {
        const auto x = Shareable(prev), y = Shareable(i);
        lcp = std::mismatch(x.begin(), x.end(), y.begin(), y.end()).first - x.begin();
      }
      int popped = -1;
      while (nodes_[static_cast<size_t>(stack.back())].depth > lcp) {
        popped = stack.back();
        stack.pop_back();
        if (nodes_[static_cast<size_t>(stack.back())].depth >= lcp) {
          nodes_[static_cast<size_t>(stack.back())].children.push_back(popped);
          popped = -1;
        } else {
          break;
        }
      }
      if (popped >= 0) {  // the branch point lies inside the popped node's edge
        const int branch = NewNode(lcp, i);
        nodes_[static_cast<size_t>(branch)].children.push_back(popped);
        stack.push_back(branch);
      }
      const int64_t len = Length(i) - 1;
      if (len == nodes_[static_cast<size_t>(stack.back())].depth) {
        nodes_[static_cast<size_t>(stack.back())].ends.push_back(i);
      } else {
        const int leaf = NewNode(len, i);
        nodes_[static_cast<size_t>(leaf)].ends.push_back(i);
        stack.push_back(leaf);
      }
      prev = i;
    }
    while (stack.size() > 1) {
      const int child = stack.back();
      stack.pop_back();
      nodes_[static_cast<size_t>(stack.back())].children.push_back(child);
    }
    // Parents' depths (for the ideal) and a post-order (children before parents).
    parent_depth_.assign(nodes_.size(), 0);
    std::vector<int> todo = {0};
    while (!todo.empty()) {
      const int v = todo.back();
      todo.pop_back();
      post_order_.push_back(v);
      for (int c : nodes_[static_cast<size_t>(v)].children) {
        parent_depth_[static_cast<size_t>(c)] = nodes_[static_cast<size_t>(v)].depth;
        todo.push_back(c);
      }
    }
    std::reverse(post_order_.begin(), post_order_.end());
  }

  // The DP: per node, share it or let each child decide.
  void Choose() {
    for (int v : post_order_) {
      Node& node = nodes_[static_cast<size_t>(v)];
      node.n = static_cast<int64_t>(node.ends.size());
      int64_t split = 0;
      for (int c : node.children) {
        node.n += nodes_[static_cast<size_t>(c)].n;
        split += nodes_[static_cast<size_t>(c)].best;
      }
      const int64_t shared = Usable(node.depth);
      if (node.ends.size() >= 2) split += (static_cast<int64_t>(node.ends.size()) - 1) * shared;
      const int64_t whole = v == 0 ? 0 : (node.n - 1) * shared;
      node.group = whole > 0 && whole >= split;
      node.best = std::max(whole, split);
    }
  }

  // Groups from the DP's choices; prompts that share nothing worth it run alone.
  void Assign() {
    PlanGroup alone;
    std::vector<int> todo = {0};
    while (!todo.empty()) {
      const Node& node = nodes_[static_cast<size_t>(todo.back())];
      todo.pop_back();
      const int64_t shared = Usable(node.depth);
      if (node.group) {
        PlanGroup g{.prefix_tokens = shared};
        Collect(node, &g.members);
        plan_.groups.push_back(std::move(g));
        continue;
      }
      if (node.ends.size() >= 2 && shared > 0) {
        plan_.groups.push_back(PlanGroup{.prefix_tokens = shared, .members = node.ends});
      } else {
        alone.members.insert(alone.members.end(), node.ends.begin(), node.ends.end());
      }
      for (auto c = node.children.rbegin(); c != node.children.rend(); ++c) todo.push_back(*c);
    }
    plan_.groups.push_back(std::move(alone));
  }

  void Collect(const Node& root, std::vector<int>* out) const {
    std::vector<const Node*> todo = {&root};
    while (!todo.empty()) {
      const Node* node = todo.back();
      todo.pop_back();
      out->insert(out->end(), node->ends.begin(), node->ends.end());
      for (int c : node->children) todo.push_back(&nodes_[static_cast<size_t>(c)]);
    }
  }

  // Decode-heavy first (BatchLLM §3.3): groups by their decode-to-prompt ratio, and
  // members within a group the same way; ties keep the input order.
  void OrderByDecodeRatio() {
    auto ratio = [this](int i) {
      return static_cast<double>(prompts_[static_cast<size_t>(i)].max_new_tokens) / static_cast<double>(Length(i));
    };
    for (PlanGroup& g : plan_.groups) {
      std::sort(g.members.begin(), g.members.end(), [&](int a, int b) {
        const double ra = ratio(a), rb = ratio(b);
        return ra != rb ? ra > rb : a < b;
      });
    }
    auto group_ratio = [this](const PlanGroup& g) {
      double decode = 0, prompt = 0;
      for (int m : g.members) {
        decode += static_cast<double>(prompts_[static_cast<size_t>(m)].max_new_tokens);
        prompt += static_cast<double>(Length(m));
      }
      return prompt > 0 ? decode / prompt : 0.0;
    };
    std::vector<std::pair<double, PlanGroup>> keyed;
    for (PlanGroup& g : plan_.groups) {
      if (g.members.empty()) continue;
      keyed.emplace_back(group_ratio(g), std::move(g));
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first > b.first;
      return *std::min_element(a.second.members.begin(), a.second.members.end()) <
             *std::min_element(b.second.members.begin(), b.second.members.end());
    });
    plan_.groups.clear();
    for (auto& [r, g] : keyed) plan_.groups.push_back(std::move(g));
  }

  // Plain prefix reuse: what each first-level branch shares, in input order.
  void FirstLevel() {
    const Node& root = nodes_[0];
    PlanGroup alone{.members = root.ends};
    for (int c : root.children) {
      const Node& node = nodes_[static_cast<size_t>(c)];
      PlanGroup g{.prefix_tokens = Usable(node.depth)};
      Collect(node, &g.members);
      if (g.members.size() < 2 || g.prefix_tokens == 0) {
        alone.members.insert(alone.members.end(), g.members.begin(), g.members.end());
      } else {
        plan_.groups.push_back(std::move(g));
      }
    }
    plan_.groups.push_back(std::move(alone));
    for (PlanGroup& g : plan_.groups) std::sort(g.members.begin(), g.members.end());
    std::sort(plan_.groups.begin(), plan_.groups.end(), [](const PlanGroup& a, const PlanGroup& b) {
      if (a.members.empty() || b.members.empty()) return !a.members.empty() && b.members.empty();
      return a.members.front() < b.members.front();
    });
  }

  absl::Span<const PlanPrompt> prompts_;
  const PlanOptions options_;
  std::vector<Node> nodes_;
  std::vector<int64_t> parent_depth_;
  std::vector<int> post_order_;
  Plan plan_;
};

}  // namespace

Plan MakePlan(absl::Span<const PlanPrompt> prompts, const PlanOptions& options) {
  return Planner(prompts, options).Run();
}

}  // namespace strata::batch
