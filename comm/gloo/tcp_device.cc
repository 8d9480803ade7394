// comm/gloo/gloo_device.h on Gloo's TCP transport (Linux).
#include "comm/gloo/gloo_device.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"

namespace muster::comm::internal {

const char* GlooTransportName() { return "TCP"; }

std::shared_ptr<::gloo::transport::Device> NewGlooDevice(
    const CoreConfig& config) {
  ::gloo::transport::tcp::attr attr;
  if (!config.iface.empty()) {
    attr.iface = config.iface;
  } else {
    attr.hostname = config.hostname;
  }
  return ::gloo::transport::tcp::CreateDevice(attr);
}

std::string GlooAddressName(const std::vector<char>& bytes) {
  return ::gloo::transport::tcp::Address(bytes).str();
}

bool GlooHasBoundBuffers() { return true; }

}  // namespace muster::comm::internal
