#include "runtime/event_loop.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <string>

namespace ipoibd::runtime {

namespace {

timespec to_timespec(Clock::time_point at) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
    timespec ts{};
    if (ns <= 0) {
        ts.tv_nsec = 1;  // {0, 0} would disarm the timerfd; any past instant fires at once
        return ts;
    }
    ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    return ts;
}

std::uint32_t epoll_events(EventLoop::Interest interest) {
    return interest == EventLoop::Interest::readable ? std::uint32_t{EPOLLIN} : std::uint32_t{EPOLLOUT};
}

}  // namespace

expected<std::unique_ptr<EventLoop>, SysError> EventLoop::create() {
    std::unique_ptr<EventLoop> loop(new EventLoop());
    if (auto r = loop->init(); !r) return unexpected(r.error());
    return loop;
}

expected<void, SysError> EventLoop::init() {
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) return unexpected(SysError{"create epoll instance", errno});
    timerfd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!timerfd_) return unexpected(SysError{"create timerfd", errno});
    sigemptyset(&signal_mask_);
    signalfd_.reset(::signalfd(-1, &signal_mask_, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!signalfd_) return unexpected(SysError{"create signalfd", errno});
    wakeup_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wakeup_) return unexpected(SysError{"create eventfd", errno});
    if (auto r = epoll_add(timerfd_.get(), kTimerToken, EPOLLIN); !r) return r;
    if (auto r = epoll_add(signalfd_.get(), kSignalToken, EPOLLIN); !r) return r;
    return epoll_add(wakeup_.get(), kWakeupToken, EPOLLIN);
}

EventLoop::~EventLoop() = default;

expected<void, SysError> EventLoop::epoll_add(int fd, std::uint64_t token, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0)
        return unexpected(SysError{"add fd " + std::to_string(fd) + " to epoll", errno});
    return {};
}

// ---- fds ----

expected<void, SysError> EventLoop::add_fd(int fd, FdHandler handler, Interest interest) {
    if (fd_tokens_.contains(fd)) return unexpected(SysError{"add fd " + std::to_string(fd) + " to epoll", EEXIST});
    // Each registration gets a fresh token, so an event already returned by
    // epoll_wait for a removed fd cannot reach a later registration that
    // reuses the fd number.
    const std::uint64_t token = next_token_++;
    if (auto r = epoll_add(fd, token, epoll_events(interest)); !r) return r;
    fd_tokens_[fd] = token;
    fd_entries_[token] = std::make_shared<FdEntry>(FdEntry{.fd = fd, .handler = std::move(handler)});
    return {};
}

expected<void, SysError> EventLoop::set_interest(int fd, Interest interest) {
    auto it = fd_tokens_.find(fd);
    if (it == fd_tokens_.end()) return unexpected(SysError{"modify fd " + std::to_string(fd) + " in epoll", ENOENT});
    epoll_event ev{};
    ev.events = epoll_events(interest);
    ev.data.u64 = it->second;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) < 0)
        return unexpected(SysError{"modify fd " + std::to_string(fd) + " in epoll", errno});
    return {};
}

void EventLoop::remove_fd(int fd) {
    auto it = fd_tokens_.find(fd);
    if (it == fd_tokens_.end()) return;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);  // fails only if fd was closed first
    fd_entries_.erase(it->second);                           // a running handler keeps its own reference
    fd_tokens_.erase(it);
}

// ---- timers ----

TimerId EventLoop::add_timer(Clock::time_point at, TimerHandler handler) {
    const std::uint64_t id = next_timer_++;
    timers_.emplace(id, std::move(handler));
    deadlines_.push_back(Deadline{.at = at, .id = id});
    std::push_heap(deadlines_.begin(), deadlines_.end(), std::greater<>());
    return TimerId{id};
}

TimerId EventLoop::add_timer_after(Clock::duration delay, TimerHandler handler) {
    return add_timer(Clock::now() + delay, std::move(handler));
}

bool EventLoop::cancel_timer(TimerId id) {
    if (timers_.erase(id.value) == 0) return false;
    // The heap entry goes when it reaches the top, or in a compaction when
    // cancelled entries outnumber live ones (long timeouts cancelled early,
    // the common case for request timers).
    if (deadlines_.size() > 2 * timers_.size() + 64) compact_deadlines();
    return true;
}

void EventLoop::compact_deadlines() {
    std::erase_if(deadlines_, [this](const Deadline& d) { return !timers_.contains(d.id); });
    std::make_heap(deadlines_.begin(), deadlines_.end(), std::greater<>());
}

void EventLoop::drop_cancelled_top() {
    while (!deadlines_.empty() && !timers_.contains(deadlines_.front().id)) {
        std::pop_heap(deadlines_.begin(), deadlines_.end(), std::greater<>());
        deadlines_.pop_back();
    }
}

expected<void, SysError> EventLoop::rearm_timerfd() {
    drop_cancelled_top();
    std::optional<Clock::time_point> want;
    if (!deadlines_.empty()) want = deadlines_.front().at;
    if (want == armed_at_) return {};
    itimerspec spec{};
    if (want) spec.it_value = to_timespec(*want);  // else all zero: disarm
    if (::timerfd_settime(timerfd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) < 0)
        return unexpected(SysError{"arm timerfd", errno});
    armed_at_ = want;
    return {};
}

std::size_t EventLoop::run_due_timers() {
    std::uint64_t expirations = 0;
    [[maybe_unused]] auto n = ::read(timerfd_.get(), &expirations, sizeof expirations);  // EAGAIN: re-armed meanwhile
    armed_at_.reset();  // a one-shot timerfd that fired holds nothing
    const auto now = Clock::now();
    std::size_t ran = 0;
    while (ran < kTimersPerWakeup) {
        drop_cancelled_top();
        if (deadlines_.empty() || deadlines_.front().at > now) break;
        const std::uint64_t id = deadlines_.front().id;
        std::pop_heap(deadlines_.begin(), deadlines_.end(), std::greater<>());
        deadlines_.pop_back();
        auto it = timers_.find(id);
        TimerHandler handler = std::move(it->second);
        timers_.erase(it);
        handler();  // may add or cancel timers
        ++ran;
    }
    return ran;
}

// ---- signals ----

expected<void, SysError> EventLoop::block_signals(std::initializer_list<int> signals) {
    sigset_t set;
    sigemptyset(&set);
    for (int s : signals) sigaddset(&set, s);
    if (int e = ::pthread_sigmask(SIG_BLOCK, &set, nullptr); e != 0) return unexpected(SysError{"block signals", e});
    return {};
}

expected<void, SysError> EventLoop::block_daemon_signals() {
    return block_signals({kDaemonSignals[0], kDaemonSignals[1], kDaemonSignals[2], kDaemonSignals[3]});
}

expected<void, SysError> EventLoop::on_signal(int signo, SignalHandler handler) {
    const std::string what = "watch signal " + std::to_string(signo);
    if (auto r = block_signals({signo}); !r) return unexpected(SysError{what, r.error().error});
    sigset_t mask = signal_mask_;
    if (sigaddset(&mask, signo) < 0) return unexpected(SysError{what, errno});
    if (::signalfd(signalfd_.get(), &mask, 0) < 0) return unexpected(SysError{what, errno});
    signal_mask_ = mask;
    signal_handlers_[signo] = std::move(handler);
    return {};
}

std::size_t EventLoop::read_signals() {
    std::array<signalfd_siginfo, kSignalsPerWakeup> infos{};
    const ssize_t n = ::read(signalfd_.get(), infos.data(), sizeof infos);
    if (n <= 0) return 0;  // EAGAIN: another reader took it
    const std::size_t count = static_cast<std::size_t>(n) / sizeof(signalfd_siginfo);
    for (std::size_t i = 0; i < count; ++i) {
        const SignalInfo info{.signo = static_cast<int>(infos[i].ssi_signo),
                              .sender_pid = static_cast<pid_t>(infos[i].ssi_pid),
                              .sender_uid = static_cast<uid_t>(infos[i].ssi_uid)};
        auto it = signal_handlers_.find(info.signo);
        if (it == signal_handlers_.end()) continue;
        auto handler = it->second;  // the handler may replace itself
        handler(info);
    }
    return count;
}

// ---- running ----

void EventLoop::set_on_iteration(IterationHook hook, std::optional<Clock::duration> at_least_every) {
    on_iteration_ = std::move(hook);
    iteration_period_ = at_least_every;
}

void EventLoop::stop() {
    stop_requested_.store(true);
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wakeup_.get(), &one, sizeof one);  // EAGAIN: already pending
}

void EventLoop::drain_wakeup() {
    std::uint64_t count = 0;
    [[maybe_unused]] auto n = ::read(wakeup_.get(), &count, sizeof count);
}

std::optional<int> EventLoop::wait_timeout_ms(std::optional<Clock::duration> timeout) const {
    if (iteration_period_ && (!timeout || *iteration_period_ < *timeout)) timeout = iteration_period_;
    if (!timeout) return std::nullopt;
    if (*timeout <= Clock::duration::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*timeout).count();
    return static_cast<int>(std::min<std::chrono::milliseconds::rep>(ms, INT_MAX));
}

expected<std::size_t, SysError> EventLoop::run_once(std::optional<Clock::duration> timeout) {
    if (auto r = rearm_timerfd(); !r) return unexpected(r.error());
    std::array<epoll_event, kEventsPerWait> events{};
    const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()),
                               wait_timeout_ms(timeout).value_or(-1));
    if (n < 0 && errno != EINTR) return unexpected(SysError{"wait for events (epoll_wait)", errno});
    std::size_t handled = 0;
    for (int i = 0; i < n; ++i) {
        const std::uint64_t token = events[static_cast<std::size_t>(i)].data.u64;
        if (token == kTimerToken) {
            handled += run_due_timers();
        } else if (token == kSignalToken) {
            handled += read_signals();
        } else if (token == kWakeupToken) {
            drain_wakeup();
        } else if (auto it = fd_entries_.find(token); it != fd_entries_.end()) {
            const std::shared_ptr<FdEntry> entry = it->second;  // survives remove_fd() from inside
            entry->handler();
            ++handled;
        }
        // else: removed by an earlier handler of this batch
    }
    if (on_iteration_) on_iteration_();
    return handled;
}

expected<void, SysError> EventLoop::run() {
    busy_.attach_to_this_thread();
    while (!stop_requested_.load()) {
        const bool poll = polling(Clock::now());
        auto r = run_once(poll ? std::optional(Clock::duration::zero()) : std::nullopt);
        if (!r) {
            stop_requested_.store(false);
            return unexpected(r.error());
        }
        if (poll) busy_.polled(*r != 0);
    }
    stop_requested_.store(false);
    return {};
}

}  // namespace ipoibd::runtime
