// Typed reading of the fields of one decoded journal record (a CBOR/JSON object), for the
// record codecs (src/txn/participant_records.cc, src/txn/coordinator_records.cc). Generic: it
// knows no record type.
//
// Every accessor checks presence and type; the first failure is kept and reported as
// kJournalCorrupt naming the record's sequence number, its type and the field
// ("record 7 (OUTCOME): field 'decision' is missing"); later accessors then return defaults.
// Optional fields: absent or null gives the default (nullopt), a present value of the wrong
// type is still corruption. Fields the codec does not read are ignored (a newer writer's).
//
// Thread-safety: a RecordFields is a plain value used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx {

class RecordFields {
 public:
  // Fields of record `seq` of type `type` ("record 7 (OUTCOME)" in errors).
  // REQUIRES: `r` outlives this object.
  RecordFields(const nlohmann::json& r, uint64_t seq, std::string type)
      : r_(r), seq_(seq), type_(std::move(type)) {}
  // Fields of another value (a state snapshot, a nested object): `what` names it in errors.
  static RecordFields Named(const nlohmann::json& r, std::string what) {
    RecordFields f(r, 0, std::move(what));
    f.named_ = true;
    return f;
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // The record, for messages: "record 7 (OUTCOME)".
  std::string What() const;
  // Records `message` about `field` as the error (the first one wins).
  void Fail(std::string_view field, std::string_view message);

  bool Has(std::string_view key) const;  // present and not null

  std::string String(std::string_view key);
  std::optional<std::string> OptString(std::string_view key);
  int64_t Int(std::string_view key);
  std::optional<int64_t> OptInt(std::string_view key);
  uint64_t Uint(std::string_view key);
  bool Bool(std::string_view key);
  std::optional<bool> OptBool(std::string_view key);
  // An array of strings; absent gives {} when !required.
  std::vector<std::string> Strings(std::string_view key, bool required = false);
  // An array of integers; absent gives {} when !required.
  std::vector<int64_t> Ints(std::string_view key, bool required = false);
  // A CBOR byte string.
  std::vector<uint8_t> Binary(std::string_view key);
  // The field's value, if present and of `type` (for nested objects and arrays the codec
  // walks itself); nullptr otherwise (an error unless absent and !required).
  const nlohmann::json* Object(std::string_view key, bool required = false);
  const nlohmann::json* Array(std::string_view key, bool required = false);

  // A string field naming one value of an enum: `parse` maps a name to it (nullopt: unknown,
  // "field 'key' <expected>"). Absent: nullopt, an error when `required`.
  template <typename E, typename Parse>
  std::optional<E> Enum(std::string_view key, Parse&& parse, std::string_view expected,
                        bool required = true) {
    std::optional<std::string> name =
        required ? std::optional<std::string>(String(key)) : OptString(key);
    if (!ok() || !name) return std::nullopt;
    std::optional<E> v = parse(*name);
    if (!v) Fail(key, expected);
    return v;
  }

  // The fields of an object nested in this one (a member, an array element), named
  // "record 7 (TYPE name)" in errors.
  RecordFields Nested(const nlohmann::json& v, std::string_view name) const;
  // Calls fn(RecordFields&) for each element of the array `key`, every one an object, read
  // as Nested(element, "key[i]"); the first error (of the array, an element or fn's reads)
  // becomes this object's.
  template <typename Fn>
  void ForEachObject(std::string_view key, bool required, Fn&& fn) {
    const nlohmann::json* a = Array(key, required);
    if (!a) return;
    for (size_t i = 0; i < a->size() && ok(); ++i) {
      const std::string at = std::string(key) + "[" + std::to_string(i) + "]";
      if (!(*a)[i].is_object()) {
        Fail(at, "is not an object");
        return;
      }
      RecordFields element = Nested((*a)[i], at);
      fn(element);
      if (!element.ok()) status_ = element.status();
    }
  }
  // Calls fn(RecordFields&) on the object `key` (read as Nested(value, "key")) if present.
  template <typename Fn>
  void WithObject(std::string_view key, bool required, Fn&& fn) {
    const nlohmann::json* o = Object(key, required);
    if (!o) return;
    RecordFields member = Nested(*o, key);
    fn(member);
    if (!member.ok() && ok()) status_ = member.status();
  }

  // Nested values: the same checks on an element of an array, named `name` in errors.
  std::string StringAt(const nlohmann::json& v, std::string_view name);
  int64_t IntAt(const nlohmann::json& v, std::string_view name);

 private:
  const nlohmann::json* Find(std::string_view key, bool required);
  const nlohmann::json& r_;
  uint64_t seq_;
  std::string type_;
  bool named_ = false;
  Status status_;
};

// A JSON value of an optional string: the string, or null.
inline nlohmann::json OptionalStringJson(const std::optional<std::string>& s) {
  return s ? nlohmann::json(*s) : nlohmann::json();
}

// `value` when every field read through `f` was valid, else its error.
template <typename T>
Result<T> FieldsResult(const RecordFields& f, T value) {
  if (!f.ok()) return f.status();
  return value;
}

// The "seq" of a decoded record (0 when absent or not a non-negative integer): for error messages
// before the record's type is known.
uint64_t RecordSeqOf(const nlohmann::json& r);

}  // namespace wtx
