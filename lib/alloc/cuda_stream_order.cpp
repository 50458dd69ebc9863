#include "alloc/cuda_stream_order.hpp"

#include <memory>
#include <mutex>
#include <vector>

#include "driver/driver.hpp"

namespace gpumem::alloc {
namespace {

struct Event {
  CUevent event;
  CUcontext context;
};

class CudaStreamOrder final : public StreamOrder {
 public:
  explicit CudaStreamOrder(int device) : device_(device) {}

  Fence record(gpumem_stream_t stream) override {
    const CUcontext context = context_of(stream);
    driver::ContextScope scope(context);
    Event* e = take(context);
    if (const CUresult r = driver::api().cuEventRecord(e->event, stream); r != CUDA_SUCCESS) {
      release(e);
      driver::throw_result(r, "cuEventRecord of a pool's fence (was the stream destroyed?)");
    }
    return e;
  }

  void wait(gpumem_stream_t stream, Fence fence) override {
    driver::ContextScope scope(context_of(stream));
    driver::check(driver::api().cuStreamWaitEvent(stream, static_cast<Event*>(fence)->event, 0),
                  "cuStreamWaitEvent on a pool's fence");
  }

  bool query(Fence fence) override {
    const CUresult r = driver::api().cuEventQuery(static_cast<Event*>(fence)->event);
    if (r == CUDA_ERROR_NOT_READY) return false;
    driver::check(r, "cuEventQuery of a pool's fence");
    return true;
  }

  void synchronize(Fence fence) override {
    driver::check(driver::api().cuEventSynchronize(static_cast<Event*>(fence)->event),
                  "cuEventSynchronize of a pool's fence");
  }

  void release(Fence fence) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    spare_.push_back(static_cast<Event*>(fence));  // room was made when the event was
  }

 private:
  // A stream's own context; for the default streams, the device's primary context (or, for host
  // memory, the calling thread's).
  CUcontext context_of(gpumem_stream_t stream) const {
    if (const CUcontext c = driver::stream_context(stream)) return c;
    return device_ >= 0 ? driver::primary_context(device_) : driver::current_context();
  }

  // A spare event of the context, or a new one. With the context current.
  Event* take(CUcontext context) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = spare_.size(); i-- > 0;) {
        if (spare_[i]->context != context) continue;
        Event* e = spare_[i];
        spare_[i] = spare_.back();
        spare_.pop_back();
        return e;
      }
    }
    auto e = std::make_unique<Event>(Event{nullptr, context});
    {
      std::lock_guard<std::mutex> lock(mutex_);
      spare_.reserve(++events_);  // so that release() never allocates
    }
    driver::check(driver::api().cuEventCreate(&e->event, CU_EVENT_DISABLE_TIMING), "cuEventCreate for a pool's fence");
    return e.release();  // kept for the process, in spare_ when not in use
  }

  const int device_;
  std::mutex mutex_;  // guards spare_ and events_; never held across a driver call
  std::vector<Event*> spare_;
  size_t events_ = 0;
};

}  // namespace

StreamOrder* cuda_stream_order(int device) {
  static std::mutex mutex;
  static auto* orders = new std::vector<std::unique_ptr<CudaStreamOrder>>;  // leaked: used at exit
  std::lock_guard<std::mutex> lock(mutex);
  const size_t slot = static_cast<size_t>(device + 1);
  if (orders->size() <= slot) orders->resize(slot + 1);
  if (!(*orders)[slot]) (*orders)[slot] = std::make_unique<CudaStreamOrder>(device);
  return (*orders)[slot].get();
}

}  // namespace gpumem::alloc
