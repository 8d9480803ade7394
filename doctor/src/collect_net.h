// The part of every collector that only needs platform::Net: probes of the
// targets, interfaces, routes, sockets and binds on the plan's ports, and the
// host name. Private to doctor/.
#ifndef MUSTER_DOCTOR_SRC_COLLECT_NET_H_
#define MUSTER_DOCTOR_SRC_COLLECT_NET_H_

#include "muster/doctor/facts.h"
#include "muster/platform/net.h"

namespace muster::doctor::internal {

// Fills probes, interfaces, advertised_address, routes, sockets,
// bind_errors and host (but host.hosts_file). Blocks for about one
// plan.options.timeout (the probes run concurrently) plus the lookups.
void CollectNetworkFacts(const Plan& plan, platform::Net& net, Facts* facts);

}  // namespace muster::doctor::internal

#endif  // MUSTER_DOCTOR_SRC_COLLECT_NET_H_
