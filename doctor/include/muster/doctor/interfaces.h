// Which interface each library picks, from the interface facts: NCCL's
// socket interfaces, PyTorch's Gloo device, libmuster_comm's address. Pure
// functions of hand-made or collected facts.
#ifndef MUSTER_DOCTOR_INTERFACES_H_
#define MUSTER_DOCTOR_INTERFACES_H_

#include <map>
#include <string>
#include <vector>

#include "muster/platform/net.h"

namespace muster::doctor {

using InterfaceAddress = platform::InterfaceAddress;
using IpFamily = platform::IpFamily;

struct InterfaceChoice {
  std::vector<InterfaceAddress> chosen;  // in the library's order
  std::string rule;                      // how the choice was made, in words
  std::string error;  // what the library fails with; empty when it does not
};

// NCCL's socket interface choice (ncclFindInterfaces, NCCL 2.2x). With
// NCCL_SOCKET_IFNAME longer than one character: a comma list of name prefixes
// ("eth,ib"), "=" for exact names ("=eth0"), "^" to exclude ("^docker,lo"),
// "^=" to exclude exact names; ":port" suffixes are ignored. None matching is
// an error. Unset: "ib" interfaces; else the subnet of NCCL_COMM_ID's address;
// else anything but docker*, lo* and virbr*; else docker*, then lo, then
// virbr*. Only running interfaces count (NCCL before 2.21 also took ones that
// were down); IPv6 loopback never; NCCL_SOCKET_FAMILY=AF_INET|AF_INET6
// restricts the family; each interface once, with its first address. The
// first chosen is the bootstrap interface; the socket transport uses up to
// `max_interfaces`.
InterfaceChoice NcclSocketInterfaces(
    const std::vector<InterfaceAddress>& addresses,
    const std::map<std::string, std::string>& env, int max_interfaces = 16);

// What the host name resolves to, each address with whether this host can
// bind it.
struct ResolvedAddress {
  std::string address;
  bool bindable = false;
  bool loopback = false;
};

// Gloo's device as PyTorch's ProcessGroupGloo makes it. GLOO_SOCKET_IFNAME
// (a comma list: one device per name): the first address of the interface of
// exactly that name; a name with no address is an error ("Unable to find
// address for: X"). Unset: the first address the host name resolves to that
// can be bound, which may well be 127.0.1.1; when none can, the loopback
// address.
InterfaceChoice PytorchGlooDevice(
    const std::vector<InterfaceAddress>& addresses,
    const std::map<std::string, std::string>& env, const std::string& hostname,
    const std::vector<ResolvedAddress>& hostname_addresses);

// libmuster_comm's Gloo address: MUSTER_SOCKET_IFNAME, then
// GLOO_SOCKET_IFNAME, else this node's advertised address
// (`advertised_address`; loopback when every rank is local).
InterfaceChoice MusterCommDevice(const std::vector<InterfaceAddress>& addresses,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& advertised_address);

// The address muster advertises to peers, from the interfaces: the first
// non-loopback IPv4 address of an interface that is up, else 127.0.0.1 (as
// muster::DefaultAdvertisedAddress() on the live host).
std::string AdvertisedAddress(const std::vector<InterfaceAddress>& addresses);

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_INTERFACES_H_
