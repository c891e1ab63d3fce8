// GIDs as text: the IPv6 notation every IB tool prints ("fe80::2:c903:0:1",
// "ff12:401b:ffff::ffff:ffff").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "transport/wire/headers.h"

namespace ipoibd {

std::optional<ib::Gid> parse_gid(std::string_view text);
std::string format_gid(const ib::Gid& gid);

}  // namespace ipoibd
