// Guest mode of dsec-init (guest.cpp): when dsec-init is the PID 1 of a
// microvm or vm sandbox, it first builds the sandbox root from the layer
// disks and relays the node's control channel from a virtio-serial port.
#pragma once

namespace dsec::init {

/// Returns at once in a container (fd 3 is the node's socket). In a guest
/// VM: sets the guest up, and returns only in a forked child that carries on
/// as the ordinary init (fd 3 then listens, connected to by PID 1); PID 1
/// itself never returns.
void guest_boot();

} // namespace dsec::init
