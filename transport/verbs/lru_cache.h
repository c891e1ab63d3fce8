// A small bounded map that forgets its least recently used entry when full.
//
// The verbs backend keeps its address handles (ibv_ah) here, so a daemon
// sending to a few hundred neighbours creates a few hundred AHs, not one per
// packet, and a daemon that has talked to many forgets the stale ones.
// Values are held by value; for AHs the value is a shared_ptr, so an entry
// evicted while a send that uses it is still in flight stays alive until that
// send's completion drops the last reference (ibv_post_send(3): an AH must
// not be destroyed before its work requests complete).
#pragma once

#include <cstddef>
#include <list>
#include <unordered_map>
#include <utility>

namespace ipoibd::transport::verbs {

template <class Key, class Value, class Hash>
class LruCache {
public:
    explicit LruCache(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

    // The value cached for `key`, now the most recently used; nullptr if absent.
    // The pointer is valid until the next insert() or clear().
    Value* find(const Key& key) {
        auto it = index_.find(key);
        if (it == index_.end()) return nullptr;
        order_.splice(order_.begin(), order_, it->second);
        return &it->second->second;
    }

    // Caches `value` under `key` as the most recently used entry, replacing a
    // previous value for the same key; when the cache is full the least
    // recently used entry is dropped first. Returns the stored value.
    Value& insert(const Key& key, Value value) {
        if (auto it = index_.find(key); it != index_.end()) {
            it->second->second = std::move(value);
            order_.splice(order_.begin(), order_, it->second);
            return it->second->second;
        }
        if (order_.size() >= capacity_) {
            index_.erase(order_.back().first);
            order_.pop_back();
            ++evictions_;
        }
        order_.emplace_front(key, std::move(value));
        index_.emplace(key, order_.begin());
        return order_.front().second;
    }

    void clear() {
        index_.clear();
        order_.clear();
    }

    std::size_t size() const { return order_.size(); }
    std::size_t capacity() const { return capacity_; }
    std::size_t evictions() const { return evictions_; }

private:
    using Entry = std::pair<Key, Value>;
    std::size_t capacity_;
    std::size_t evictions_ = 0;
    std::list<Entry> order_;  // front: most recently used
    std::unordered_map<Key, typename std::list<Entry>::iterator, Hash> index_;
};

}  // namespace ipoibd::transport::verbs
