// comm/gloo/gloo_device.h on Gloo's libuv transport (Windows).
#include "comm/gloo/gloo_device.h"
#include "gloo/transport/uv/address.h"
#include "gloo/transport/uv/device.h"

namespace muster::comm::internal {

const char* GlooTransportName() { return "libuv"; }

std::shared_ptr<::gloo::transport::Device> NewGlooDevice(
    const CoreConfig& config) {
  ::gloo::transport::uv::attr attr;
  // Gloo's uv device looks an interface up with getifaddrs, which Windows
  // lacks: it gets the chosen interface's address instead.
  attr.hostname = config.iface.empty() ? config.hostname : config.bind_ip;
  return ::gloo::transport::uv::CreateDevice(attr);
}

std::string GlooAddressName(const std::vector<char>& bytes) {
  return ::gloo::transport::uv::Address(bytes).str();
}

bool GlooHasBoundBuffers() { return false; }

}  // namespace muster::comm::internal
