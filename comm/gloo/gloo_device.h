// Which of Gloo's transports the Gloo backend runs on, behind one small
// interface: Gloo's TCP transport on Linux (tcp_device.cc), its libuv
// transport on Windows (uv_device.cc; Gloo's TCP transport is Linux-only).
//
// The two differ in one way the backend must know: the libuv transport
// implements only Gloo's *unbound* buffers (Pair::createSendBuffer and
// createRecvBuffer abort the process), so the algorithm classes built on
// bound buffers (gloo::AllreduceRing, AllreduceHalvingDoubling, ...) cannot
// run on it; GlooHasBoundBuffers() says whether they can.
#ifndef MUSTER_COMM_GLOO_GLOO_DEVICE_H_
#define MUSTER_COMM_GLOO_GLOO_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "comm/src/core.h"
#include "gloo/transport/device.h"

namespace muster::comm::internal {

// The transport's name in messages ("TCP", "libuv").
const char* GlooTransportName();

// The transport's device on the interface (config.iface, whose address is
// config.bind_ip) or the address (config.hostname) `config` chose. Throws
// what Gloo throws (the caller converts it, gloo_status.h).
std::shared_ptr<::gloo::transport::Device> NewGlooDevice(
    const CoreConfig& config);

// A peer's address as connectFullMesh publishes it (the bytes of the
// transport's Address), printed as Gloo prints it ("[10.0.0.2]:41234").
// Throws what Gloo throws on bytes that are not an address.
std::string GlooAddressName(const std::vector<char>& bytes);

// Whether the transport implements bound buffers (the algorithm classes).
bool GlooHasBoundBuffers();

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_GLOO_GLOO_DEVICE_H_
