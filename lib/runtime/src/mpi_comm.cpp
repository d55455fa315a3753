#include "pipebench/runtime/mpi_comm.hpp"

#include <sched.h>
#include <stdlib.h>

#include <algorithm>

#include <fmt/format.h>

#include "pipebench/core/clock.hpp"
#include "pipebench/core/error.hpp"

namespace pipebench {

namespace {
constexpr double kSpinSeconds = 20e-6;

// Whether the MPI library gives the core up itself (sched_yield) when a test
// finds nothing to progress: Open MPI's `mpi_yield_when_idle`, which mpirun
// turns on when it places more ranks than cores, read through the MPI tool
// interface (false where the variable does not exist). A wait on an MPI
// request then does not yield again: a second sched_yield per poll doubled
// the context switches (bench/whole/sim_bubble.sh, 4 ranks on 2 cores: a
// zero-cost m = 16 step ~430 µs median, ~250 µs without it).
bool read_mpi_yields_when_idle() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return false;
  bool yields = false;
  int index = -1;
  if (MPI_T_cvar_get_index("mpi_yield_when_idle", &index) == MPI_SUCCESS) {
    char name[128], desc[8];
    int name_len = sizeof(name), desc_len = sizeof(desc), verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_get_info(index, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &bind, &scope) ==
            MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      if (count == 1 && type == MPI_C_BOOL) {
        bool value = false;
        if (MPI_T_cvar_read(handle, &value) == MPI_SUCCESS) yields = value;
      } else if (count == 1 && type == MPI_INT) {
        int value = 0;
        if (MPI_T_cvar_read(handle, &value) == MPI_SUCCESS) yields = value != 0;
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return yields;
}

bool mpi_yields_when_idle() {
  static const bool yields = read_mpi_yields_when_idle();
  return yields;
}
}  // namespace

void prefer_ring_iallreduce() { setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0); }

void mpi_check(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  throw MpiError(fmt::format("rank {}: {} failed at {}:{}: {}", world_rank, call, file, line, std::string(text, len)));
}

RunComm::RunComm(MPI_Comm comm) { init(comm, nullptr); }

RunComm::RunComm(MPI_Comm run, const parallel::RankGrid& grid) { init(run, &grid); }

void RunComm::init(MPI_Comm run, const parallel::RankGrid* grid) {
  run_ = run;
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(run_, &run_rank_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(run_, &run_size_));
  if (grid && grid->size() != run_size_)
    throw Error(fmt::format("the run's rank grid has {} ranks, its communicator {}", grid->size(), run_size_));
  const parallel::Coord at = grid ? grid->coord(run_rank_) : parallel::Coord{run_rank_, 0, 0, 0};
  const int D = grid ? grid->shape().data : 1, T = grid ? grid->shape().tensor : 1, C = grid ? grid->shape().context : 1;
  // The pipeline: the ranks of this replica, context and tensor rank, by
  // stage; the gradient group: this stage's and tensor rank's replicas and
  // context ranks, replica-major; the tensor group: this stage's, replica's
  // and context rank's tensor ranks; the context group: this stage's,
  // replica's and tensor rank's context ranks.
  PIPEBENCH_MPI_CHECK(MPI_Comm_split(run_, (at.data * C + at.context) * T + at.tensor, at.pipeline, &comm_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_split(run_, at.pipeline * T + at.tensor, at.data * C + at.context, &data_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_split(run_, (at.pipeline * D + at.data) * C + at.context, at.tensor, &tensor_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_split(run_, (at.pipeline * D + at.data) * T + at.tensor, at.context, &context_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(data_, &grad_rank_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(data_, &grad_size_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(context_, &context_rank_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(context_, &context_size_));
  replica_ = at.data;
  replicas_ = D;
  PIPEBENCH_MPI_CHECK(MPI_Comm_rank(tensor_, &tensor_rank_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_size(tensor_, &tensor_size_));
  PIPEBENCH_MPI_CHECK(MPI_Comm_dup(run_, &control_));
  // The pipeline's and the data group's ranks on this node: those of a
  // shared-memory split of each.
  auto on_this_node = [](MPI_Comm group, int rank, int size) {
    MPI_Comm node = MPI_COMM_NULL;
    PIPEBENCH_MPI_CHECK(MPI_Comm_split_type(group, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    int node_size = 0;
    PIPEBENCH_MPI_CHECK(MPI_Comm_size(node, &node_size));
    MPI_Group node_group, whole;
    PIPEBENCH_MPI_CHECK(MPI_Comm_group(node, &node_group));
    PIPEBENCH_MPI_CHECK(MPI_Comm_group(group, &whole));
    std::vector<int> node_ranks(static_cast<std::size_t>(node_size)), ranks(node_ranks.size());
    for (int i = 0; i < node_size; ++i) node_ranks[static_cast<std::size_t>(i)] = i;
    PIPEBENCH_MPI_CHECK(MPI_Group_translate_ranks(node_group, node_size, node_ranks.data(), whole, ranks.data()));
    std::vector<char> same(static_cast<std::size_t>(size), 0);
    for (int r : ranks) same[static_cast<std::size_t>(r)] = 1;
    MPI_Group_free(&node_group);
    MPI_Group_free(&whole);
    MPI_Comm_free(&node);
    return same;
  };
  same_node_ = on_this_node(comm_, rank_, size_);
  const std::vector<char> data_same = on_this_node(data_, grad_rank_, grad_size_);
  data_on_one_node_ = std::all_of(data_same.begin(), data_same.end(), [](char c) { return c != 0; });
}

RunComm::~RunComm() {
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
  if (!free_groups_) return;
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
  if (tensor_ != MPI_COMM_NULL) MPI_Comm_free(&tensor_);
  if (context_ != MPI_COMM_NULL) MPI_Comm_free(&context_);
}

void RunComm::wait(MPI_Request& req, const char* what) {
  wait_until(
      [&req] {
        int done = 0;
        PIPEBENCH_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        return done != 0;
      },
      what, mpi_yields_when_idle());
}

void RunComm::wait_for(const std::function<bool()>& done, const char* what) { wait_until(done, what, false); }

void RunComm::wait_until(const std::function<bool()>& done, const char* what, bool done_yields) {
  const double start = now_s();
  for (long polls = 0;; ++polls) {
    if (done()) return;
    if (!aborted_ && (polls & 15) == 0) {
      check_aborts(what);
      if (deadline_s_ > 0.0 && now_s() > deadline_s_)
        throw StepTimeoutError(fmt::format("rank {} waited {:.3f} s for {} and passed the step timeout", run_rank_,
                                           now_s() - start, what));
    }
    // Spin briefly for latency, then yield the core at every poll: ranks may
    // outnumber cores, and a spinning waiter would delay the rank it waits
    // for. Not when done() has yielded already (an MPI test, see above).
    if (!done_yields && now_s() - start > kSpinSeconds) sched_yield();
  }
}

void RunComm::check_aborts(const char* what) {
  if (aborted_) return;
  int pending = 0;
  MPI_Status st;
  PIPEBENCH_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, run_, &pending, &st));
  if (pending)
    throw PeerAbortedError(fmt::format("rank {} failed while rank {} waited for {}", st.MPI_SOURCE, run_rank_, what),
                           st.MPI_SOURCE);
}

void RunComm::barrier() {
  MPI_Request req;
  PIPEBENCH_MPI_CHECK(MPI_Ibarrier(run_, &req));
  wait(req, "the step barrier");
}

void RunComm::allreduce(std::vector<double>& values, MPI_Op op, Group group) {
  const MPI_Comm on = group == Group::pipeline ? comm_ : group == Group::data ? data_ : run_;
  MPI_Request req;
  PIPEBENCH_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, op,
                                     on, &req));
  wait(req, "a reduction");
}

void RunComm::gather_to_root(const void* mine, const std::vector<int>& bytes, const std::vector<int>& offsets,
                             void* into, const char* what) {
  MPI_Request req;
  PIPEBENCH_MPI_CHECK(MPI_Igatherv(mine, bytes[static_cast<std::size_t>(rank_)], MPI_BYTE, into, bytes.data(),
                                   offsets.data(), MPI_BYTE, 0, comm_, &req));
  wait(req, what);
}

void RunComm::notify_abort() {
  if (aborted_) return;
  aborted_ = true;
  abort_payload_.assign(static_cast<std::size_t>(run_size_), run_rank_);
  for (int peer = 0; peer < run_size_; ++peer) {
    if (peer == run_rank_) continue;
    MPI_Request req;
    PIPEBENCH_MPI_CHECK(MPI_Isend(&abort_payload_[static_cast<std::size_t>(peer)], 1, MPI_INT, peer, kAbortTag,
                                  run_, &req));
    abort_sends_.push_back(req);
  }
}

void RunComm::settle(double timeout_s) {
  const double deadline = now_s() + timeout_s;
  const bool yields = mpi_yields_when_idle();
  // A request that does not complete by the deadline is left pending: the
  // launch ends (PeerLostError), nothing else will use these communicators.
  auto await = [&](MPI_Request& req, const char* what) {
    for (;;) {
      int done = 0;
      PIPEBENCH_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (now_s() > deadline)
        throw PeerLostError(fmt::format("rank {}: the other ranks of the run did not answer within {:.0f} s while {} "
                                        "(a rank is stopped, hung or lost)",
                                        run_rank_, timeout_s, what));
      if (!yields) sched_yield();  // as wait(): not twice per poll
    }
  };
  // How many notices each rank must receive: one from every rank that aborted.
  int mine = aborted_ ? 1 : 0, total = 0;
  MPI_Request req;
  PIPEBENCH_MPI_CHECK(MPI_Iallreduce(&mine, &total, 1, MPI_INT, MPI_SUM, control_, &req));
  await(req, "settling the run");
  const int expected = total - mine;  // nobody notifies itself
  for (int i = 0; i < expected; ++i) {
    int from = 0;
    PIPEBENCH_MPI_CHECK(MPI_Irecv(&from, 1, MPI_INT, MPI_ANY_SOURCE, kAbortTag, run_, &req));
    await(req, "collecting abort notices");
  }
  for (MPI_Request& send : abort_sends_) await(send, "delivering abort notices");
  abort_sends_.clear();
}

}  // namespace pipebench
