// The results file's HDF5 plumbing shared by its writer (results_write.cpp)
// and reader (results_read.cpp): checked calls, owned ids, and the event
// row's compound type. Internal to lib/results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <hdf5.h>

#include "pipebench/results/results.hpp"

namespace pipebench::h5 {


// Every HDF5 call that returns an id or status goes through this.
template <typename T>
inline T h5_check(T rc, const char* call, const char* file, int line) {
  if (rc < 0) throw ResultsError(fmt::format("HDF5 call {} failed at {}:{}", call, file, line));
  return rc;
}
#define H5_CHECK(call) h5_check((call), #call, __FILE__, __LINE__)

// Owns an hid_t and closes it with the right function.
class Hid {
 public:
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hid() {
    if (id_ >= 0) close_(id_);
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

inline Hid vlen_string_type() {
  Hid t(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}


// The compound type of /runs/<name>/events. kind is an HDF5 enum F|B|W.
// wait_s came later: a file without it reads as NaN (not recorded).
struct EventRow {
  std::int32_t step, rank;
  std::int8_t kind;
  std::int32_t microbatch, chunk;
  double start_s, end_s;
  double wait_s;
};
inline constexpr const char* kEventMembers[] = {"step", "rank", "kind", "microbatch", "chunk", "start_s", "end_s"};

inline Hid event_type(bool with_wait = true) {
  Hid kind(H5_CHECK(H5Tenum_create(H5T_NATIVE_INT8)), H5Tclose);
  for (std::int8_t v : {std::int8_t{0}, std::int8_t{1}, std::int8_t{2}}) {
    const char* names[] = {"F", "B", "W"};
    H5_CHECK(H5Tenum_insert(kind, names[v], &v));
  }
  Hid t(H5_CHECK(H5Tcreate(H5T_COMPOUND, sizeof(EventRow))), H5Tclose);
  H5_CHECK(H5Tinsert(t, "step", HOFFSET(EventRow, step), H5T_NATIVE_INT32));
  H5_CHECK(H5Tinsert(t, "rank", HOFFSET(EventRow, rank), H5T_NATIVE_INT32));
  H5_CHECK(H5Tinsert(t, "kind", HOFFSET(EventRow, kind), kind));
  H5_CHECK(H5Tinsert(t, "microbatch", HOFFSET(EventRow, microbatch), H5T_NATIVE_INT32));
  H5_CHECK(H5Tinsert(t, "chunk", HOFFSET(EventRow, chunk), H5T_NATIVE_INT32));
  H5_CHECK(H5Tinsert(t, "start_s", HOFFSET(EventRow, start_s), H5T_NATIVE_DOUBLE));
  H5_CHECK(H5Tinsert(t, "end_s", HOFFSET(EventRow, end_s), H5T_NATIVE_DOUBLE));
  if (with_wait) H5_CHECK(H5Tinsert(t, "wait_s", HOFFSET(EventRow, wait_s), H5T_NATIVE_DOUBLE));
  return t;
}

// Event rows are converted and written kEventBlock at a time (a run's
// events can be millions: no second copy of them all).
inline constexpr std::size_t kEventBlock = std::size_t{1} << 16;

template <typename T>
hid_t native_type();
template <> inline hid_t native_type<double>() { return H5T_NATIVE_DOUBLE; }
template <> inline hid_t native_type<std::int64_t>() { return H5T_NATIVE_INT64; }
template <> inline hid_t native_type<std::uint64_t>() { return H5T_NATIVE_UINT64; }
template <> inline hid_t native_type<int>() { return H5T_NATIVE_INT; }
template <> inline hid_t native_type<std::uint8_t>() { return H5T_NATIVE_UINT8; }

inline bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

// H5Literate's callback: appends each link's name to the std::vector<std::string> at `out`.
inline herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

// A string attribute, checked (results_read.cpp).
std::string read_attr_string(hid_t obj, const char* name);

}  // namespace pipebench::h5
