// A FIFO of fixed capacity over one allocation made up front: the queues of
// a QP (posted receive buffers, completions) hold at most their depth, so
// the data path never allocates per packet (std::deque allocates a chunk
// each time it advances past one).
#pragma once

#include <cstddef>
#include <vector>

namespace ipoibd::transport {

template <class T>
class Ring {
public:
    // Empties the ring and sets its capacity (the one allocation).
    void reset(std::size_t capacity) {
        slots_.assign(capacity, T{});
        head_ = count_ = 0;
    }
    std::size_t capacity() const { return slots_.size(); }
    std::size_t size() const { return count_; }
    bool empty() const { return count_ == 0; }
    bool full() const { return count_ == slots_.size(); }

    // False (nothing stored) when full.
    bool push_back(const T& v) {
        if (full()) return false;
        slots_[(head_ + count_) % slots_.size()] = v;
        ++count_;
        return true;
    }
    const T& front() const { return slots_[head_]; }
    void pop_front() {
        head_ = (head_ + 1) % slots_.size();
        --count_;
    }

private:
    std::vector<T> slots_;
    std::size_t head_ = 0;
    std::size_t count_ = 0;
};

}  // namespace ipoibd::transport
