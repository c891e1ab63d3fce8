// MESSAGE_IDs of the journal entries operators search for
// (`journalctl MESSAGE_ID=...`), one per event, never reused for another
// meaning. Generated once from /proc/sys/kernel/random/uuid (as
// `systemd-id128 new` does) and fixed forever: scripts and alert rules
// depend on them. Their fields are listed in docs/journal.md.
#pragma once

#include <string_view>

namespace ipoibd::runtime {

// A 128-bit id as 32 lower-case hex digits; checked at compile time.
struct MessageId {
    std::string_view hex;

    consteval MessageId(const char* text) : hex(text) {
        if (hex.size() != 32) throw "a MESSAGE_ID has 32 hex digits";
        for (char c : hex)
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) throw "a MESSAGE_ID is lower-case hex";
    }
    bool operator==(const MessageId&) const = default;
};

namespace msgid {

inline constexpr MessageId kDaemonStarted = "10144f72cd0944f39aef5ac09da7e6d1";
inline constexpr MessageId kDaemonStopping = "573b47b2e67541c5841a89de8ef51df0";
inline constexpr MessageId kConfigReloaded = "9d47da9d57e149d5a7c80e063ebfacf4";
inline constexpr MessageId kLinkUp = "e6679c3ea3fe4299bcf2506d6fa52b6e";
inline constexpr MessageId kLinkDown = "bb447cf6f48d43f0a48517269d3c3b50";
inline constexpr MessageId kBroadcastJoined = "17f78c3c12084d56b196c8098c87dd66";
inline constexpr MessageId kJoinFailed = "270f111385e64fbb8e0b8bb9817d938a";
inline constexpr MessageId kGroupJoined = "3ff5632345524794ad1af2e3ae2e654c";
inline constexpr MessageId kGroupLeft = "e76c6dd85cca45b3a21a4210382defed";
inline constexpr MessageId kPeerChanged = "83a43dfde6fc44e58dc86812c926fe36";
inline constexpr MessageId kConnectionFailed = "7afebae7504c401ca29142d4397f68c2";

}  // namespace msgid
}  // namespace ipoibd::runtime
