// A non-owning reference to something callable: what std::function gives a callee that only
// calls it during the call, without std::function's heap block for a lambda that captures more
// than two pointers (a collective's header maker captures five references; at a few
// microseconds a collective, that allocation and its free were a measurable part).
//
//   void each_peer(FunctionRef<Header(int)> header_for);   // header_for(peer) inside only
//   each_peer([&](int peer) { return header_of(xs[peer]); });
//
// The callable must outlive the reference: pass lambdas as arguments, never store one.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace tandem {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  // A function (a name or a pointer): kept as a function pointer, which void* cannot hold.
  template <typename F, typename = std::enable_if_t<std::is_function_v<F>>>
  FunctionRef(F* f)  // NOLINT(google-explicit-constructor)
      : call_([](Target target, Args... args) -> R {
          return reinterpret_cast<F*>(target.function)(std::forward<Args>(args)...);
        }) {
    target_.function = reinterpret_cast<void (*)()>(f);
  }

  // Any other callable (a lambda, an object with operator()): kept by address.
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                    !std::is_function_v<std::remove_reference_t<F>> &&
                                                    !std::is_pointer_v<std::decay_t<F>> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>,
            typename = void>
  FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): stands in for a callable argument
      : call_([](Target target, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(target.object))(std::forward<Args>(args)...);
        }) {
    target_.object = const_cast<void*>(static_cast<const void*>(std::addressof(f)));
  }

  R operator()(Args... args) const { return call_(target_, std::forward<Args>(args)...); }

 private:
  union Target {
    void* object;
    void (*function)();
  };
  Target target_;
  R (*call_)(Target, Args...);
};

}  // namespace tandem
