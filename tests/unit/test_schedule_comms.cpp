// The compute_comms CSV form (issue 39): every built-in schedule written with
// its transfers and read back gives the same action lists; a file as
// PyTorch writes it (the format of its documentation: SEND_F, RECV_F,
// SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD) is read; transfers that do
// not match, that NCCL would match out of order, or that deadlock are
// refused before anything runs, with what each rank waits for.
#include <string>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/error.hpp"
#include "pipebench/schedule/schedule.hpp"
#include "pipebench/schedule/schedule_csv.hpp"
#include "pipebench/schedule/sync_actions.hpp"
#include "pipebench/schedule/validate.hpp"

using namespace pipebench;

namespace {
std::string error_of(const std::string& csv, int p, int m) {
  try {
    schedule_from_csv(csv, p, m, "c.csv");
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("compute_comms: every built-in schedule round-trips with its transfers", "[schedule][csv][comms]") {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 2 * p + 2; ++m) {
      std::vector<Schedule> all = {make_gpipe(p, m), make_1f1b(p, m), make_eager_1f1b(p, m), make_zb_h1(p, m),
                                   make_zb_v(p, m), make_looped_bfs(p, m, 3)};
      if (m % p == 0) all.push_back(make_interleaved_1f1b(p, m, 2));
      if (schedule_microbatch_problem(ScheduleKind::interleaved_zb, p, m).empty()) all.push_back(make_interleaved_zb(p, m, 2));
      if (m >= 2 * p) all.push_back(make_dualpipev(p, m));
      for (const Schedule& s : all) {
        INFO(s.name << " p = " << p << ", m = " << m);
        const std::string text = schedule_to_comms_csv(s);
        INFO(text);
        const Schedule back = schedule_from_csv(text, p, m, "x.csv");  // validate_comms passes
        CHECK(back.actions == s.actions);
        if (p > 1) CHECK(back.placement == s.placement);  // one rank: a V and a loop are the same map
        CHECK(check_schedule(back).empty());
        CHECK(back.file_reduce_grad.empty());
      }
    }
  // 1F1B, p = 2, m = 2: each send right after its compute, each receive right before its consumer.
  CHECK(schedule_to_comms_csv(make_1f1b(2, 2)) ==
        "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
        "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n");
  // ZB-V's turn of the V (stages 1 and 2 on rank 1) crosses no rank: no transfer there.
  const std::string v = schedule_to_comms_csv(make_zb_v(2, 4));
  CHECK(v.find("1SEND_F") == std::string::npos);
  CHECK(v.find("2RECV_F") == std::string::npos);
}

TEST_CASE("compute_comms: receives follow the sender's order, posted early where needed", "[schedule][csv][comms]") {
  // Interleaved 1F1B on 2 ranks: rank 1 sends stage 1's activations and stage 3's gradients to rank 0, which
  // consumes them in another order than they were sent; the receives are posted in the send order.
  const Schedule s = make_interleaved_1f1b(2, 4, 2);
  const std::string text = schedule_to_comms_csv(s);
  CHECK(schedule_from_csv(text, 2, 4, "x.csv").actions == s.actions);
}

TEST_CASE("compute_comms: a file as PyTorch writes it, FSDP and gradient cells included", "[schedule][csv][comms]") {
  // 1F1B on 2 ranks with data parallelism (PyTorch's documented cell syntax: stage, type, micro-batch).
  const std::string pytorch =
      "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"
      "1UNSHARD,1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\n";
  const Schedule s = schedule_from_csv(pytorch, 2, 2, "torch.csv");
  CHECK(s.actions == make_1f1b(2, 2).actions);
  REQUIRE(s.file_reduce_grad.size() == 2);
  CHECK(s.file_reduce_grad[0] == std::vector<ReduceGrad>{{0, 3}});  // after B1, the rank's last action
  CHECK(s.file_reduce_grad[1] == std::vector<ReduceGrad>{{0, 3}});
  // REDUCE_GRAD maps to the gradient synchronisation: make_sync_schedule takes the file's launches.
  const SyncSchedule sync = make_sync_schedule(s, false);
  CHECK(sync.reduce == s.file_reduce_grad);
  CHECK(check_sync_schedule(s, sync).empty());
  // One launched before the chunk's gradients are final is refused by the sync validator.
  const Schedule early = schedule_from_csv(
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0REDUCE_GRAD,0RECV_B1,0B1\n"
      "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD\n",
      2, 2, "early.csv");
  CHECK_FALSE(check_sync_schedule(early, make_sync_schedule(early, true)).empty());
  // Written back with the reduce-grad actions.
  CHECK(schedule_to_comms_csv(s, s.file_reduce_grad) ==
        "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD\n"
        "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD\n");
}

TEST_CASE("compute_comms: planted deadlocks and mismatched transfers are refused", "[schedule][csv][comms]") {
  // Rank 1 runs F1 before B0; rank 0 sends F1 only after B0, whose gradient rank 1 sends after B0: a deadlock.
  const std::string dl = error_of(
      "0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\n"
      "1RECV_F0,1RECV_F1,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n",
      2, 2);
  CHECK_THAT(dl, Catch::Contains("c.csv: the schedule's communication is invalid"));
  CHECK_THAT(dl, Catch::Contains("deadlock: no rank can run its next cell"));
  CHECK_THAT(dl, Catch::Contains("rank 0: 0B0 waits for the gradient into stage 0 micro-batch 0 from rank 1 (its send)"));
  CHECK_THAT(dl, Catch::Contains("rank 1: 1F1 waits for the activation into stage 1 micro-batch 1 from rank 0 (its send)"));
  CHECK_THAT(dl, Catch::Contains("step x rank") && Catch::Contains("r0") && Catch::Contains("0SEND_F0"));
  // The receives in another order than the sends: NCCL would match them wrongly.
  CHECK_THAT(error_of("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                      "1RECV_F1,1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n",
                      2, 2),
             Catch::Contains("rank 0 -> rank 1: transfer 1 is the activation into stage 1 micro-batch 0 on the sender but "
                             "the activation into stage 1 micro-batch 1 on the receiver (NCCL matches"));
  // A forward without its receive, a send before its compute, a send never received, a receive never sent.
  CHECK_THAT(error_of("0F0,0SEND_F0\n1F0\n", 2, 1),
             Catch::Contains("rank 1 cell 1 (1F0): needs the activation into stage 1 micro-batch 0 from rank 0, but no "
                             "1RECV_F0 receives it before"));
  CHECK_THAT(error_of("0SEND_F0,0F0\n1RECV_F0,1F0\n", 2, 1),
             Catch::Contains("rank 0 cell 1 (0SEND_F0): sends before 0F0 has computed it"));
  CHECK_THAT(error_of("0F0,0SEND_F0,0F1,0SEND_F1\n1RECV_F0,1F0,1F1\n", 2, 2),
             Catch::Contains("needs the activation into stage 1 micro-batch 1 from rank 0, but no 1RECV_F1"));
  CHECK_THAT(error_of("0F0,0SEND_F0,0F1,0SEND_F1\n1RECV_F0,1F0,1RECV_F1,1F1\n", 3, 2),
             Catch::Contains("2 line(s) but the run has pipeline_size = 3"));
  CHECK_THAT(error_of("0F0,0SEND_F0,0F1\n1RECV_F0,1F0,1RECV_F1,1F1\n", 2, 2),
             Catch::Contains("rank 1 receives the activation into stage 1 micro-batch 1 from rank 0, which never sends it"));
  CHECK_THAT(error_of("0F0,0SEND_F0\n1F0,1SEND_F0\n", 2, 1), Catch::Contains("1SEND_F0): stage 1 has no neighbour that way"));
  CHECK_THAT(error_of("0F0,0SEND_F0,0SEND_F0\n1RECV_F0,1F0\n", 2, 1), Catch::Contains("(0SEND_F0): appears twice"));
  CHECK_THAT(error_of("0REDUCE_GRAD,0F0,0SEND_F0\n1RECV_F0,1F0\n", 2, 1),
             Catch::Contains("rank 0: 0REDUCE_GRAD before any compute action"));
}

// Issue 66 item 7: one SEND_F cell deleted from a 4-stage file is said as the
// receive without a send, not as the order mismatch it causes further on
// ("transfer 4 is ... on the sender but ... on the receiver").
TEST_CASE("compute_comms: a deleted send is named as such, before any order mismatch", "[schedule][csv][comms]") {
  const std::string one_f_one_b = schedule_to_comms_csv(make_1f1b(4, 8));
  const std::string e = error_of(testing::replaced(one_f_one_b, ",0SEND_F3", ""), 4, 8);
  CHECK_THAT(e, Catch::Contains("rank 1 receives the activation into stage 1 micro-batch 3 from rank 0, which never sends it "
                                "(no SEND_F cell on rank 0)"));
  CHECK_THAT(e, !Catch::Contains("on the sender but"));
  // A deleted receive likewise: the backward that needs it names the missing cell.
  const std::string e2 = error_of(testing::replaced(one_f_one_b, "2RECV_B5,", ""), 4, 8);
  CHECK_THAT(e2, Catch::Contains("rank 2 cell 37 (2B5): needs the gradient into stage 2 micro-batch 5 from rank 3, but no "
                                 "2RECV_B5 receives it before"));
  CHECK_THAT(e2, !Catch::Contains("on the sender but"));
}
