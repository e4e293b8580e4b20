// ExpectedVersionBuilder and ComputeExpectedVersion: the digests a full transaction writing
// exactly the given source tensors must produce, through the participant's own hash functions
// (content_hash.h). Each source is read once: every run of it that lands in a rank's parameter
// is hashed where it lands (CheckpointImageDigest: whole hash chunks straight from the source's
// bytes, only the chunks a run cuts buffered), so the sender can hash each piece as it leaves.
#include "wtx/expected_version.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <map>
#include <set>
#include <utility>

#include "src/memory/checkpoint_image_digest.h"
#include "wtx/content_hash.h"

namespace wtx {

namespace {

// Elements converted per step when the source's dtype differs from the parameter's.
constexpr size_t kConvertElements = 16 * 1024;

std::string Where(int rank, const ParamSpec& p, const ShardSpec& s) {
  return (rank >= 0 ? "rank " + std::to_string(rank) + ": " : std::string()) + "parameter '" +
         p.name + "' shard '" + s.id + "' (source '" + s.source + "')";
}

// Zero bytes for padding: fed to an image in pieces of at most this size.
const std::array<uint8_t, kHashChunkBytes>& Zeros() {
  static const std::array<uint8_t, kHashChunkBytes> zeros{};
  return zeros;
}

// Calls fn(live_offset, source_offset, count), in elements, for each maximal piece that is one
// run in both the parameter's box and the source's box, both walked row-major and paired
// element by element (what CopyBoxOut then CopyBoxIn would move). REQUIRES: equal element
// counts, both non-empty, each inside its shape.
template <typename F>
void ForEachPairedRun(const Shape& live_shape, const Box& box, const Shape& source_shape,
                      const Box& source_box, F&& fn) {
  std::vector<std::pair<int64_t, int64_t>> source_runs;
  ForEachFlatRun(source_shape, source_box,
                 [&](int64_t b, int64_t n) { source_runs.emplace_back(b, n); });
  size_t si = 0;
  int64_t used = 0;  // elements of source_runs[si] already paired
  ForEachFlatRun(live_shape, box, [&](int64_t live_begin, int64_t len) {
    while (len > 0) {
      assert(si < source_runs.size() && "the same element count in both boxes");
      const auto& [src_begin, src_len] = source_runs[si];
      const int64_t n = std::min(len, src_len - used);
      fn(live_begin, src_begin + used, n);
      live_begin += n;
      len -= n;
      used += n;
      if (used == src_len) {
        ++si;
        used = 0;
      }
    }
  });
}

}  // namespace

struct ExpectedVersionBuilder::State {
  struct Feed {  // a shard that reads a source
    uint32_t rank;
    uint32_t param;
    uint32_t shard;
  };
  struct Param {
    std::optional<CheckpointImageDigest> image;  // until complete
    std::optional<uint64_t> digest;              // once complete
  };

  std::vector<const Manifest*> manifests;
  bool name_ranks = true;                  // "rank R: " in messages
  std::vector<std::vector<Param>> params;  // [rank][param]
  std::map<std::string, std::vector<Feed>, std::less<>> feeds;
  std::set<std::string, std::less<>> added;
  bool finished = false;

  int RankLabel(uint32_t r) const { return name_ranks ? static_cast<int>(r) : -1; }
  const ParamSpec& ParamOf(const Feed& f) const { return manifests[f.rank]->params()[f.param]; }

  CheckpointImageDigest& ImageOf(uint32_t r, uint32_t i) {
    Param& p = params[r][i];
    if (!p.image) {
      p.image.emplace(static_cast<size_t>(manifests[r]->params()[i].num_bytes()));
    }
    return *p.image;
  }
  // Takes the digest of a parameter whose image is complete, and frees the image.
  void SettleIfComplete(uint32_t r, uint32_t i) {
    Param& p = params[r][i];
    if (p.image && p.image->complete()) {
      p.digest = p.image->Digest();
      p.image.reset();
    }
  }
  void AddZeros(uint32_t r, uint32_t i, const ShardSpec& s) {
    const ParamSpec& p = manifests[r]->params()[i];
    if (BoxIsEmpty(s.box)) return;
    const size_t esz = DTypeSize(p.dtype);
    CheckpointImageDigest& image = ImageOf(r, i);
    ForEachFlatRun(p.shape, s.box, [&](int64_t b, int64_t n) {
      size_t off = static_cast<size_t>(b) * esz;
      size_t left = static_cast<size_t>(n) * esz;
      while (left > 0) {
        const size_t take = std::min(left, Zeros().size());
        image.Add(off, Zeros().data(), take);
        off += take;
        left -= take;
      }
    });
  }
  Status Check(const Feed& f, const SourceTensor& t) const {
    const ParamSpec& p = ParamOf(f);
    const ShardSpec& s = p.shards[f.shard];
    const std::string where = Where(RankLabel(f.rank), p, s);
    if (Shape(t.shape) != s.source_shape) {
      return Status::InvalidArgument(where + ": source shape " + BoxToString(WholeBox(t.shape)) +
                                     ", the manifest's is " +
                                     BoxToString(WholeBox(s.source_shape)));
    }
    const size_t count = static_cast<size_t>(NumElements(s.source_shape));
    if (t.bytes != count * DTypeSize(t.dtype) || (count > 0 && t.data == nullptr)) {
      return Status::InvalidArgument(where + ": " + std::to_string(t.bytes) + " bytes, expected " +
                                     std::to_string(count * DTypeSize(t.dtype)) + " (" +
                                     std::string(DTypeName(t.dtype)) + ")");
    }
    if (!DTypeConversionIsExact(t.dtype, p.dtype)) {
      return Status::InvalidArgument(where + ": source dtype " + std::string(DTypeName(t.dtype)) +
                                     " cannot be converted exactly to the live dtype " +
                                     std::string(DTypeName(p.dtype)));
    }
    return Status::OK();
  }
  void FeedShard(const Feed& f, const SourceTensor& t, std::vector<uint8_t>* scratch) {
    const ParamSpec& p = ParamOf(f);
    const ShardSpec& s = p.shards[f.shard];
    if (BoxIsEmpty(s.box)) return;
    const size_t esz = DTypeSize(p.dtype);
    const size_t ssz = DTypeSize(t.dtype);
    const uint8_t* src = static_cast<const uint8_t*>(t.data);
    CheckpointImageDigest& image = ImageOf(f.rank, f.param);
    std::vector<CheckpointImageDigest::Run> runs;  // same dtype: hashed from the source
    ForEachPairedRun(p.shape, s.box, s.source_shape, s.source_box,
                     [&](int64_t live_off, int64_t src_off, int64_t count) {
                       size_t lo = static_cast<size_t>(live_off);
                       size_t so = static_cast<size_t>(src_off);
                       size_t n = static_cast<size_t>(count);
                       if (t.dtype == p.dtype) {
                         runs.push_back({lo * esz, src + so * ssz, n * esz});
                         return;
                       }
                       while (n > 0) {
                         const size_t step = std::min(n, kConvertElements);
                         scratch->resize(step * esz);
                         ConvertDType(t.dtype, p.dtype, src + so * ssz, scratch->data(), step);
                         image.Add(lo * esz, scratch->data(), step * esz);
                         lo += step;
                         so += step;
                         n -= step;
                       }
                     });
    image.AddRuns(runs);
  }
};

ExpectedVersionBuilder::ExpectedVersionBuilder(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
ExpectedVersionBuilder::~ExpectedVersionBuilder() = default;

Result<std::unique_ptr<ExpectedVersionBuilder>> ExpectedVersionBuilder::Create(
    const std::vector<const Manifest*>& rank_manifests) {
  if (rank_manifests.empty()) return Status::InvalidArgument("expected version of no rank");
  auto st = std::make_unique<State>();
  st->manifests = rank_manifests;
  st->params.resize(rank_manifests.size());
  for (uint32_t r = 0; r < rank_manifests.size(); ++r) {
    const Manifest* m = rank_manifests[r];
    if (!m) return Status::InvalidArgument("rank " + std::to_string(r) + ": no manifest");
    st->params[r].resize(m->params().size());
    for (uint32_t i = 0; i < m->params().size(); ++i) {
      const ParamSpec& p = m->params()[i];
      for (uint32_t k = 0; k < p.shards.size(); ++k) {
        const ShardSpec& s = p.shards[k];
        if (s.padding) continue;
        // A shard's box and source box hold the same elements in row-major order (a stacked
        // expert's box has a leading extent 1 the source lacks); packed ones do not.
        if (s.packed) {
          return Status::InvalidArgument(Where(static_cast<int>(r), p, s) +
                                         " is packed: its live bytes cannot be predicted");
        }
        if (NumElements(s.box) != NumElements(s.source_box)) {  // a manifest validates this
          return Status::InvalidArgument(
              Where(static_cast<int>(r), p, s) + ": box " + BoxToString(s.box) +
              " and source box " + BoxToString(s.source_box) + " hold different element counts");
        }
        st->feeds[s.source].push_back({r, i, k});
      }
    }
  }
  // Padding rows stay zeros, what vLLM's loader leaves: hashed with the rest, as live.
  for (uint32_t r = 0; r < rank_manifests.size(); ++r) {
    const auto& params = rank_manifests[r]->params();
    for (uint32_t i = 0; i < params.size(); ++i) {
      for (const ShardSpec& s : params[i].shards) {
        if (s.padding) st->AddZeros(r, i, s);
      }
      st->SettleIfComplete(r, i);
    }
  }
  return std::unique_ptr<ExpectedVersionBuilder>(new ExpectedVersionBuilder(std::move(st)));
}

Result<size_t> ExpectedVersionBuilder::Add(const SourceTensor& source) {
  State& st = *state_;
  assert(!st.finished && "Add after Finish");
  auto it = st.feeds.find(source.name);
  if (it == st.feeds.end()) return size_t{0};
  if (st.added.count(source.name) != 0) {
    return Status::InvalidArgument("source tensor '" + source.name + "' given twice");
  }
  for (const State::Feed& f : it->second) {
    if (Status s = st.Check(f, source); !s.ok()) return s;
  }
  st.added.insert(source.name);
  std::vector<uint8_t> scratch;
  for (const State::Feed& f : it->second) {
    st.FeedShard(f, source, &scratch);
    st.SettleIfComplete(f.rank, f.param);
  }
  return it->second.size();
}

size_t ExpectedVersionBuilder::sources_added() const { return state_->added.size(); }

Result<ExpectedVersion> ExpectedVersionBuilder::Finish() {
  State& st = *state_;
  assert(!st.finished && "Finish once");
  st.finished = true;
  ExpectedVersion out;
  for (uint32_t r = 0; r < st.manifests.size(); ++r) {
    const auto& params = st.manifests[r]->params();
    std::vector<uint64_t> digests(params.size());
    for (uint32_t i = 0; i < params.size(); ++i) {
      for (const ShardSpec& s : params[i].shards) {
        if (!s.padding && st.added.count(s.source) == 0) {
          return Status(ErrorCode::kNotFound,
                        Where(st.RankLabel(r), params[i], s) + ": no such source tensor");
        }
      }
      State::Param& p = st.params[r][i];
      // Bytes no shard holds are zeros, as a full transaction's live memory leaves them.
      digests[i] = p.digest ? *p.digest : st.ImageOf(r, i).DigestZeroFilled();
    }
    out.rank_digests.push_back(RankDigest(*st.manifests[r], digests));
  }
  out.version = CombineRankDigests(out.rank_digests);
  return out;
}

namespace {

// Feeds `builder` every source the manifests' shards read, in (rank, parameter, shard) order,
// each looked up once; absent ones are left for Finish to name.
Status FeedFromLookup(const std::vector<const Manifest*>& manifests, const SourceLookup& lookup,
                      ExpectedVersionBuilder* builder) {
  std::set<std::string, std::less<>> asked;
  for (const Manifest* m : manifests) {
    for (const ParamSpec& p : m->params()) {
      for (const ShardSpec& s : p.shards) {
        if (s.padding || !asked.insert(s.source).second) continue;
        std::optional<SourceTensor> t = lookup(s.source);
        if (!t) continue;
        t->name = s.source;
        if (auto r = builder->Add(*t); !r.ok()) return r.status();
      }
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::string> ComputeExpectedRankDigest(const Manifest& manifest,
                                              const SourceLookup& lookup) {
  auto b = ExpectedVersionBuilder::Create({&manifest});
  if (!b.ok()) return b.status();
  b.value()->state_->name_ranks = false;  // one manifest: its messages name no rank
  if (Status s = FeedFromLookup({&manifest}, lookup, b.value().get()); !s.ok()) return s;
  auto e = b.value()->Finish();
  if (!e.ok()) return e.status();
  return std::move(e.value().rank_digests[0]);
}

Result<ExpectedVersion> ComputeExpectedVersion(const std::vector<const Manifest*>& rank_manifests,
                                               const SourceLookup& lookup) {
  auto b = ExpectedVersionBuilder::Create(rank_manifests);
  if (!b.ok()) return b.status();
  if (Status s = FeedFromLookup(rank_manifests, lookup, b.value().get()); !s.ok()) return s;
  return b.value()->Finish();
}

Result<ExpectedVersion> ComputeExpectedVersion(const std::vector<const Manifest*>& rank_manifests,
                                               const std::vector<SourceTensor>& sources) {
  std::map<std::string, const SourceTensor*, std::less<>> by_name;
  for (const SourceTensor& t : sources) {
    if (!by_name.emplace(t.name, &t).second) {
      return Status::InvalidArgument("source tensor '" + t.name + "' given twice");
    }
  }
  return ComputeExpectedVersion(rank_manifests,
                                [&](std::string_view name) -> std::optional<SourceTensor> {
                                  auto it = by_name.find(name);
                                  if (it == by_name.end()) return std::nullopt;
                                  return *it->second;
                                });
}

}  // namespace wtx
