#include "transport/verbs/verbs_device.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace ipoibd::transport::verbs {

std::string DeviceState::where() const {
    return "device " + device_name + " port " + std::to_string(port_num);
}

expected<AhPtr, Error> DeviceState::address_handle(const AddressHandle& ah) {
    if (AhPtr* cached = ah_cache.find(ah)) return *cached;
    ibv_ah_attr attr = ah_attr_from(ah, port_num);
    ibv_ah* raw = ibv_create_ah(pd.get(), &attr);
    if (raw == nullptr)
        return unexpected(verbs_error("ibv_create_ah (DLID " + std::to_string(ah.dlid) + ", SL " + std::to_string(ah.sl) +
                                          (ah.grh ? ", GRH" : "") + ") on " + where(),
                                      errno));
    return ah_cache.insert(ah, AhPtr(raw, DestroyAh{}));
}

const ibv_mr* DeviceState::find_region(const void* data, std::size_t length, int access) const {
    const auto at = reinterpret_cast<std::uintptr_t>(data);
    for (const auto& [rkey, r] : regions) {
        const auto base = reinterpret_cast<std::uintptr_t>(r.mr->addr);
        if (at >= base && at + length <= base + r.mr->length && (r.access & access) == access) return r.mr.get();
    }
    return nullptr;
}

void DeviceState::wake_up() const {
    const std::uint64_t one = 1;
    // Non-blocking; a full counter (EAGAIN) is already readable.
    [[maybe_unused]] const ssize_t n = ::write(wake.get(), &one, sizeof one);
}

}  // namespace ipoibd::transport::verbs
