// The coordinator's transition table (rendezvous/src/core/job_phase.h): exactly
// the edges of the diagram are allowed, every other pair is rejected; and a
// phase maps to the JobState GetStatus reports.
#include "rendezvous/src/core/job_phase.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace muster::rendezvous {
namespace {

constexpr JobPhase kAll[] = {JobPhase::kOpen, JobPhase::kAdopting,
                             JobPhase::kRunning, JobPhase::kSucceeded,
                             JobPhase::kFailed};
static_assert(sizeof(kAll) / sizeof(kAll[0]) == kJobPhaseCount);

TEST(JobPhaseTest, TheTableHasExactlyTheDiagramsEdges) {
  using P = JobPhase;
  const std::set<std::pair<P, P>> allowed = {
      {P::kOpen, P::kOpen},        {P::kOpen, P::kAdopting},
      {P::kAdopting, P::kRunning}, {P::kAdopting, P::kOpen},
      {P::kOpen, P::kRunning},     {P::kOpen, P::kFailed},
      {P::kRunning, P::kOpen},     {P::kRunning, P::kSucceeded},
      {P::kRunning, P::kFailed},   {P::kSucceeded, P::kOpen},
      {P::kFailed, P::kOpen},
  };
  int rejected = 0;
  for (P from : kAll) {
    for (P to : kAll) {
      const bool want = allowed.contains({from, to});
      EXPECT_EQ(JobTransitionAllowed(from, to), want)
          << JobPhaseName(from) << " -> " << JobPhaseName(to);
      rejected += !want;
    }
  }
  EXPECT_EQ(rejected, 14);
  // Only a job the server did not know adopts; an adopted round ends only
  // once it runs; an ended job never runs again without a new round.
  EXPECT_FALSE(JobTransitionAllowed(P::kRunning, P::kAdopting));
  EXPECT_FALSE(JobTransitionAllowed(P::kAdopting, P::kAdopting));
  EXPECT_FALSE(JobTransitionAllowed(P::kAdopting, P::kFailed));
  EXPECT_FALSE(JobTransitionAllowed(P::kAdopting, P::kSucceeded));
  EXPECT_FALSE(JobTransitionAllowed(P::kOpen, P::kSucceeded));
  EXPECT_FALSE(JobTransitionAllowed(P::kRunning, P::kRunning));
  EXPECT_FALSE(JobTransitionAllowed(P::kSucceeded, P::kFailed));
  EXPECT_FALSE(JobTransitionAllowed(P::kFailed, P::kSucceeded));
  EXPECT_FALSE(JobTransitionAllowed(P::kSucceeded, P::kRunning));
  EXPECT_FALSE(JobTransitionAllowed(P::kFailed, P::kRunning));
}

TEST(JobPhaseTest, PhasesMapToTheReportedStates) {
  for (JobPhase p : kAll) {
    const JobState s = StateOf(p);
    EXPECT_EQ(PhaseOf(s, p == JobPhase::kAdopting), p) << JobPhaseName(p);
  }
  EXPECT_EQ(StateOf(JobPhase::kAdopting), JobState::kOpen);
  EXPECT_STREQ(JobPhaseName(JobPhase::kAdopting), "ADOPTING");
  EXPECT_STREQ(JobPhaseName(JobPhase::kOpen), "OPEN");
}

}  // namespace
}  // namespace muster::rendezvous
