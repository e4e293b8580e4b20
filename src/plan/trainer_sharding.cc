// The trainer shardings of transfer plans (wtx/transfer_plan.h): FSDP dim-0 chunks computed
// from the shape, manifest-shaped TP/EP trainers indexed by source, explicit boxes, and the
// one-line spec parser.
#include <algorithm>
#include <charconv>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "wtx/limits.h"
#include "wtx/transfer_plan.h"

namespace wtx {
namespace {

class Fsdp final : public TrainerSharding {
 public:
  explicit Fsdp(int ranks) : ranks_(ranks), spec_("fsdp:" + std::to_string(ranks)) {}
  int ranks() const override { return ranks_; }
  const std::string& spec() const override { return spec_; }
  void ForEachHolder(std::string_view, const Shape& shape, const Box& region,
                     const std::function<void(int, const Box&)>& fn) const override {
    if (shape.empty() || region.empty()) return;
    const int64_t rows = shape[0];
    const int64_t chunk = (rows + ranks_ - 1) / ranks_;
    if (chunk == 0) return;
    const int64_t first = region[0].begin / chunk;
    const int64_t last = std::min<int64_t>((region[0].end - 1) / chunk, ranks_ - 1);
    Box held = WholeBox(shape);
    for (int64_t r = first; r <= last; ++r) {
      held[0] = {r * chunk, std::min(rows, (r + 1) * chunk)};
      fn(static_cast<int>(r), held);
    }
  }

 private:
  int ranks_;
  std::string spec_;
};

// Boxes by source, then rank: the index shared by manifest-shaped and explicit trainers.
class Indexed : public TrainerSharding {
 public:
  Indexed(int ranks, std::string spec) : ranks_(ranks), spec_(std::move(spec)) {}
  int ranks() const override { return ranks_; }
  const std::string& spec() const override { return spec_; }
  void ForEachHolder(std::string_view source, const Shape&, const Box& region,
                     const std::function<void(int, const Box&)>& fn) const override {
    auto it = index_.find(source);
    if (it == index_.end()) return;
    for (const auto& [rank, box] : it->second) {
      if (Overlaps(box, region)) fn(rank, box);
    }
  }
  void ForEachHolderFrom(std::string_view source, const Shape&, const Box& region, int first,
                         const std::function<bool(int, const Box&)>& fn) const override {
    auto it = index_.find(source);
    if (it == index_.end()) return;
    const auto& held = it->second;  // in rank order (Add keeps it so)
    const size_t start =
        static_cast<size_t>(std::lower_bound(held.begin(), held.end(), first,
                                             [](const auto& h, int r) { return h.first < r; }) -
                            held.begin());
    for (size_t i = 0; i < held.size(); ++i) {
      const auto& [rank, box] = held[(start + i) % held.size()];
      if (Overlaps(box, region) && !fn(rank, box)) return;
    }
  }
  void Add(int rank, std::string_view source, Box box) {
    auto& v = index_[std::string(source)];
    // Kept in rank order (ForEachHolderFrom's binary search); identical boxes of one rank (a
    // source feeding two shards the same way) count once.
    auto at = std::lower_bound(v.begin(), v.end(), rank,
                               [](const auto& h, int r) { return h.first < r; });
    for (; at != v.end() && at->first == rank; ++at) {
      if (at->second == box) return;
    }
    v.insert(at, {rank, std::move(box)});
  }

 protected:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<std::pair<int, Box>>, Hash, std::equal_to<>> index_;

 private:
  int ranks_;
  std::string spec_;
};

class Explicit final : public Indexed {
 public:
  using Indexed::Indexed;
  Status Check(const std::function<const Shape*(std::string_view)>& shape_of) const override {
    // Sorted, so the first problem named is the same on every run.
    std::vector<std::string_view> names;
    for (const auto& [name, held] : index_) names.push_back(name);
    std::sort(names.begin(), names.end());
    for (std::string_view name : names) {
      const auto& held = index_.find(name)->second;
      const Shape* shape = shape_of(name);
      for (size_t i = 0; i < held.size(); ++i) {
        const auto& [rank, box] = held[i];
        const std::string where = spec() + ": trainer rank " + std::to_string(rank) + " source '" +
                                  std::string(name) + "' box " + BoxToString(box);
        if (shape == nullptr) {
          return Status::InvalidArgument(where + ": no engine rank holds this source");
        }
        if (!BoxInsideShape(box, *shape) || BoxIsEmpty(box)) {
          return Status::InvalidArgument(where + ": outside the source (shape " +
                                         ShapeToString(*shape) + ")");
        }
        for (size_t j = 0; j < i; ++j) {
          if (held[j].first == rank && Overlaps(held[j].second, box)) {
            return Status::InvalidArgument(where + " overlaps its box " +
                                           BoxToString(held[j].second));
          }
        }
      }
    }
    return Status::OK();
  }
};

Status SpecError(std::string_view spec, const std::string& why) {
  return Status::InvalidArgument("trainer spec '" + std::string(spec) + "': " + why);
}

// "K" of "kind:K", in [1, kMaxRanks].
Result<int> SpecDegree(std::string_view spec, std::string_view term, std::string_view value) {
  int v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < 1 || v > kMaxRanks) {
    return SpecError(spec, "'" + std::string(term) + "' needs a degree in [1, " +
                               std::to_string(kMaxRanks) + "]");
  }
  return v;
}

}  // namespace

Result<std::unique_ptr<TrainerSharding>> FsdpSharding(int ranks) {
  if (ranks < 1 || ranks > kMaxRanks) {
    return Status::InvalidArgument("fsdp: " + std::to_string(ranks) + " ranks (1.." +
                                   std::to_string(kMaxRanks) + ")");
  }
  return std::unique_ptr<TrainerSharding>(new Fsdp(ranks));
}

Result<std::unique_ptr<TrainerSharding>> ManifestSharding(std::vector<ManifestPtr> manifests,
                                                          std::string spec) {
  if (manifests.empty()) return Status::InvalidArgument(spec + ": no trainer rank");
  auto out = std::make_unique<Indexed>(static_cast<int>(manifests.size()), std::move(spec));
  for (size_t r = 0; r < manifests.size(); ++r) {
    for (const ParamSpec& p : manifests[r]->params()) {
      for (const ShardSpec& s : p.shards) {
        if (!s.padding) out->Add(static_cast<int>(r), s.source, s.source_box);
      }
    }
  }
  return std::unique_ptr<TrainerSharding>(std::move(out));
}

Result<std::unique_ptr<TrainerSharding>> ExplicitSharding(
    std::vector<std::map<std::string, std::vector<Box>, std::less<>>> holdings) {
  if (holdings.empty() || holdings.size() > static_cast<size_t>(kMaxRanks)) {
    return Status::InvalidArgument("explicit trainer sharding: " + std::to_string(holdings.size()) +
                                   " ranks (1.." + std::to_string(kMaxRanks) + ")");
  }
  const int n = static_cast<int>(holdings.size());
  auto out = std::make_unique<Explicit>(n, "explicit:" + std::to_string(n));
  for (int r = 0; r < n; ++r) {
    for (auto& [source, boxes] : holdings[r]) {
      for (Box& b : boxes) out->Add(r, source, std::move(b));
    }
  }
  return std::unique_ptr<TrainerSharding>(std::move(out));
}

Result<std::unique_ptr<TrainerSharding>> ParseTrainerSpec(std::string_view spec,
                                                          const nlohmann::json* hf_config,
                                                          const HfManifestOptions& base) {
  int fsdp = 0, tp = 0, ep = 0;
  size_t at = 0;
  if (spec.empty()) return SpecError(spec, "empty (fsdp:K, tp:K, ep:E or tp:T,ep:E)");
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string_view term = spec.substr(at, comma - at);
    const size_t colon = term.find(':');
    if (colon == std::string_view::npos) {
      return SpecError(spec, "'" + std::string(term) + "' is not KIND:DEGREE (fsdp|tp|ep)");
    }
    const std::string_view kind = term.substr(0, colon);
    WTX_ASSIGN_OR_RETURN(degree, SpecDegree(spec, term, term.substr(colon + 1)));
    int* slot = kind == "fsdp" ? &fsdp : kind == "tp" ? &tp : kind == "ep" ? &ep : nullptr;
    if (slot == nullptr) {
      return SpecError(spec, "unknown kind '" + std::string(kind) + "' (fsdp|tp|ep)");
    }
    if (*slot != 0) return SpecError(spec, "'" + std::string(kind) + "' given twice");
    *slot = degree;
    at = comma + 1;
  }
  if (fsdp != 0) {
    if (tp != 0 || ep != 0) return SpecError(spec, "fsdp does not combine with tp or ep");
    return FsdpSharding(fsdp);
  }
  if (hf_config == nullptr) {
    return SpecError(spec, "a tp/ep trainer is laid out from the model's config.json: give it");
  }
  HfManifestOptions o = base;
  o.tp = tp == 0 ? 1 : tp;
  o.ep = ep == 0 ? 1 : ep;
  auto ranks = ManifestsOfGroup(*hf_config, o);
  if (!ranks.ok()) return SpecError(spec, ranks.status().message());
  return ManifestSharding(std::move(ranks).value(), std::string(spec));
}

}  // namespace wtx
