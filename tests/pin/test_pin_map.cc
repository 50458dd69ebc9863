// The pin bookkeeping on its own, with a backend that refuses overlapping registrations: a seeded
// random sequence of pins, unpins, forgets, flushes and budget changes against a per-byte model,
// with the full invariant walk after every step.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>
#include "core/error.hpp"
#include "pin/pin_map.hpp"
using namespace gpumem::pin;
struct Ledger : Backend {
  std::map<uintptr_t, uintptr_t> regs;
  long reg_calls = 0, unreg_calls = 0;
  void lock_pages(uintptr_t s, size_t n) override {
    auto it = regs.upper_bound(s);
    if (it != regs.begin() && std::prev(it)->second > s) {
      printf("OVERLAP reg %lx\n", s);
      abort();
    }
    if (it != regs.end() && it->first < s + n) {
      printf("OVERLAP2 reg %lx\n", s);
      abort();
    }
    regs[s] = s + n;
    ++reg_calls;
  }
  void unlock_pages(uintptr_t s, size_t) override {
    if (!regs.erase(s)) {
      printf("UNREG unknown %lx\n", s);
      abort();
    }
    ++unreg_calls;
  }
};
int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3000;
  Ledger f;
  const size_t page = 4096;
  const uintptr_t base = 0x100000;
  const size_t span = 64 * page;
  PinMap m(f, page, 16 * page);
  std::vector<int> model(span, 0);
  std::mt19937_64 rng(7);
  int ok = 0, notowned = 0;
  for (int i = 0; i < steps; ++i) {
    size_t a = rng() % span, len = 1 + rng() % (span - a < 20000 ? span - a : 20000);
    int op = rng() % 10;
    try {
      if (op < 4) {
        m.pin(base + a, len);
        for (size_t b = a; b < a + len; ++b) model[b]++;
      } else if (op < 8) {
        bool all = true;
        for (size_t b = a; b < a + len; ++b) all &= model[b] > 0;
        try {
          m.unpin(base + a, len);
          if (!all) {
            printf("unpin should fail\n");
            return 1;
          }
          for (size_t b = a; b < a + len; ++b) model[b]--;
        } catch (const gpumem::Error& e) {
          if (all) {
            printf("unpin failed: %s\n", e.what());
            return 1;
          }
          ++notowned;
        }
      } else if (op == 8) {
        bool any = false;
        for (size_t b = a; b < a + len; ++b) any |= model[b] > 0;
        try {
          m.forget(base + a, len);
          if (any) {
            printf("forget should be busy\n");
            return 1;
          }
        } catch (const gpumem::Error& e) {
          if (!any && e.status() != GPUMEM_ERROR_BUSY) {
            printf("forget: %s\n", e.what());
            return 1;
          }
        }
      } else {
        if (rng() % 2)
          m.flush();
        else
          m.set_budget(rng() % (32 * page));
      }
      // query check
      size_t qa = rng() % span, ql = 1 + rng() % (span - qa);
      int cnt = 0;
      for (size_t b = qa; b < qa + ql; ++b) cnt += model[b] > 0;
      State want = cnt == (int)ql ? State::full : cnt ? State::partial : State::none;
      if (m.query(base + qa, ql) != want) {
        printf("query mismatch at op %d\n", i);
        return 1;
      }
      m.check_invariants();
      for (size_t b = 0; b < span; b += 97)
        if (model[b] > 0) {
          uintptr_t p = (base + b) & ~(page - 1);
          auto it = f.regs.upper_bound(p);
          if (it == f.regs.begin() || std::prev(it)->second <= p) {
            printf("pinned byte unregistered\n");
            return 1;
          }
        }
      Stats s = m.stats();
      if (s.cached > s.budget) {
        printf("over budget\n");
        return 1;
      }
      ++ok;
    } catch (const gpumem::Error& e) {
      printf("op %d failed: %s\n", i, e.what());
      return 1;
    }
  }
  for (size_t b = 0; b < span; ++b)
    while (model[b] > 0) {
      m.unpin(base + b, 1);
      model[b]--;
    }
  m.flush();
  m.check_invariants();
  Stats s = m.stats();
  printf("ok %d notowned %d regs left %zu reg_calls %ld unreg %ld hits %lu misses %lu evictions %lu\n", ok, notowned,
         f.regs.size(), f.reg_calls, f.unreg_calls, s.hits, s.misses, s.evictions);
  return f.regs.empty() ? 0 : 1;
}
