// The building blocks of the TCP transport: SHA-256 / HMAC (OpenSSL, src/net/crypto.h) against
// the published vectors, the frame decoder against malformed input, and the codec of the
// protocol values.
#include <catch2/catch.hpp>

#include "src/net/channel.h"
#include "src/net/codec.h"
#include "src/net/crypto.h"

namespace wtx::net {
namespace {

using nlohmann::json;

std::string Unhex(const std::string& h) {
  std::string o;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    o.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return o;
}

TEST_CASE("Sha256MatchesFips180Vectors", "[net]") {
  CHECK(ToHex(Sha256Of("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(ToHex(Sha256Of("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(ToHex(Sha256Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(ToHex(Sha256Of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
                       "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu")) ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a'.
  CHECK(ToHex(Sha256Of(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("HmacSha256MatchesRfc4231Vectors", "[net]") {
  // RFC 4231 test cases 1-4, 6, 7 (case 5 truncates the output; checked as a prefix).
  CHECK(ToHex(HmacSha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(ToHex(HmacSha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(ToHex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  CHECK(ToHex(HmacSha256(Unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                         std::string(50, '\xcd'))) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  CHECK(ToHex(HmacSha256(std::string(20, '\x0c'), "Test With Truncation")).substr(0, 32) ==
        "a3b6167473100ee06e0c796c2955552b");
  CHECK(ToHex(HmacSha256(std::string(131, '\xaa'),
                         "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(ToHex(HmacSha256(std::string(131, '\xaa'),
                         "This is a test using a larger than block-size key and a larger than "
                         "block-size data. The key needs to be hashed before being used by the "
                         "HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  CHECK(ConstantTimeEqual("abc", "abc"));
  CHECK_FALSE(ConstantTimeEqual("abc", "abd"));
  CHECK_FALSE(ConstantTimeEqual("abc", "abcd"));
}

TEST_CASE("HandshakeMacBindsEveryField", "[net]") {
  const std::string base = HandshakeMac("s3cret", "client", "sn", "cn", "rank", 1);
  CHECK(base.size() == 64);
  CHECK(base != HandshakeMac("s3cret!", "client", "sn", "cn", "rank", 1));
  CHECK(base != HandshakeMac("s3cret", "server", "sn", "cn", "rank", 1));
  CHECK(base != HandshakeMac("s3cret", "client", "sn2", "cn", "rank", 1));
  CHECK(base != HandshakeMac("s3cret", "client", "sn", "cn2", "rank", 1));
  CHECK(base != HandshakeMac("s3cret", "client", "sn", "cn", "control", 1));
  CHECK(base != HandshakeMac("s3cret", "client", "sn", "cn", "rank", 0));
  CHECK(RandomNonce() != RandomNonce());
}

TEST_CASE("FramesRoundTripAndMalformedPayloadsAreRefused", "[net]") {
  const json m = {{"id", 7}, {"m", "prepare"}, {"p", {{"tx", "t1"}}}, {"from", 3}};
  const std::string f = EncodeFrame(m);
  REQUIRE(f.size() > 4);
  const uint32_t n = (uint32_t{uint8_t(f[0])} << 24) | (uint32_t{uint8_t(f[1])} << 16) |
                     (uint32_t{uint8_t(f[2])} << 8) | uint32_t{uint8_t(f[3])};
  CHECK(n == f.size() - 4);
  auto back = DecodePayload(reinterpret_cast<const uint8_t*>(f.data()) + 4, n);
  REQUIRE(back.ok());
  CHECK(back.value() == m);

  auto bad = [](const std::string& bytes) {
    return DecodePayload(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).ok();
  };
  CHECK_FALSE(bad("\xff\xfe garbage"));
  CHECK_FALSE(bad(std::string("\xa1\x61", 2)));      // map cut short
  CHECK_FALSE(bad(std::string("\x83\x01\x02", 3)));  // array of 3 with 2 items
  CHECK_FALSE(bad(std::string("\x01", 1)));          // not a map
  CHECK_FALSE(bad(std::string("\xa0\x00", 2)));      // trailing bytes
  CHECK_FALSE(bad(std::string("\xbb\xff\xff\xff\xff\xff\xff\xff\xff", 9)));  // huge count
  // Nesting bomb: 100000 nested arrays must be refused without recursing.
  std::string bomb = "\xa1\x61x";
  bomb += std::string(100000, '\x81');
  bomb += '\x00';
  CHECK_FALSE(bad(bomb));
  // Nesting within the limit is fine.
  std::string ok = "\xa1\x61x";
  ok += std::string(30, '\x81');
  ok += '\x00';
  CHECK(bad(ok));
}

TEST_CASE("CodecRoundTripsProtocolValues", "[net]") {
  BeginRequest req;
  req.tx = "t9";
  req.kind = TxKind::kDelta;
  req.base = "abc";
  req.sources = {"a.weight", "b.weight"};
  req.rollback = true;
  auto r = BeginRequestFromJson(BeginRequestToJson(req));
  REQUIRE(r.ok());
  CHECK(r->tx == "t9");
  CHECK(r->kind == TxKind::kDelta);
  CHECK(r->sources == req.sources);
  CHECK(r->rollback);

  Vote v;
  v.rank = 3;
  v.tx = "t9";
  v.error = ErrorCode::kCoverageIncomplete;
  v.errors = {ErrorCode::kCoverageIncomplete, ErrorCode::kStaleDerived};
  v.message = "missing k";
  v.missing.push_back({"qkv", "k", {{32, 40}, {0, 16}}, "k_proj", {1}, 2});
  v.missing_total = 1;
  v.stale.push_back({"W_UK_T", Phase::kAttention, {"kv_b"}});
  auto vb = VoteFromJson(VoteToJson(v));
  REQUIRE(vb.ok());
  CHECK(vb->rank == 3);
  CHECK(vb->errors == v.errors);
  REQUIRE(vb->missing.size() == 1);
  CHECK(vb->missing[0].box == v.missing[0].box);
  CHECK(vb->missing[0].missing_parts == std::vector<int>{1});
  REQUIRE(vb->stale.size() == 1);
  CHECK(vb->stale[0].phase == Phase::kAttention);

  // Wrong types never throw: they are errors naming the value.
  json broken = VoteToJson(v);
  broken["yes"] = "maybe";
  CHECK(VoteFromJson(broken).status().code() == ErrorCode::kInvalidArgument);
  CHECK_FALSE(VoteFromJson(json::array()).ok());
  CHECK_FALSE(BeginRequestFromJson(json{{"tx", 1}}).ok());
  CHECK(StatusFromJson(StatusToJson(Status(ErrorCode::kDirty, "d"))).code() == ErrorCode::kDirty);
}

}  // namespace
}  // namespace wtx::net

TEST_CASE("ProtocolRankFieldsAreNeverTruncated", "[net]") {
  // 2^32 + 1 was read as rank 1 (nlohmann's get<int>() truncates).
  nlohmann::json v = {
      {"rank", (uint64_t{1} << 32) + 1}, {"fingerprint", "f"}, {"kernel_identity", "k"}};
  auto d = wtx::net::RankDescriptionFromJson(v);
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.status().message(), Catch::Contains("rank"));
  v["rank"] = 1;
  CHECK(wtx::net::RankDescriptionFromJson(v).ok());
  v["rank"] = 1.0;
  CHECK_FALSE(wtx::net::RankDescriptionFromJson(v).ok());
}
