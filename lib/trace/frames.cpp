#include "trace/frames.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <unwind.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "trace/coding.hpp"
#include "trace/trace.hpp"

namespace gpumem::trace {
namespace {

// The executable segments of libgpumem, whose frames a stack leaves out.
struct CodeRanges {
  static constexpr int kMax = 8;
  uintptr_t begin[kMax] = {}, end[kMax] = {};
  int count = 0;
  bool contains(uintptr_t a) const {
    for (int i = 0; i < count; ++i)
      if (a >= begin[i] && a < end[i]) return true;
    return false;
  }
};

int find_own_code(dl_phdr_info* info, size_t, void* arg) {
  const auto marker = reinterpret_cast<uintptr_t>(&capture_native);
  bool ours = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + p.p_vaddr;
    if (p.p_type == PT_LOAD && marker >= start && marker < start + p.p_memsz) ours = true;
  }
  if (!ours) return 0;
  // Linked into the program itself (the library's internal tests), gpumem shares its object with
  // its callers: nothing is left out then, since nothing tells the two apart.
  if (!info->dlpi_name || !info->dlpi_name[0]) return 1;
  auto* ranges = static_cast<CodeRanges*>(arg);
  for (int i = 0; i < info->dlpi_phnum && ranges->count < CodeRanges::kMax; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD || !(p.p_flags & PF_X)) continue;
    ranges->begin[ranges->count] = info->dlpi_addr + p.p_vaddr;
    ranges->end[ranges->count] = info->dlpi_addr + p.p_vaddr + p.p_memsz;
    ++ranges->count;
  }
  return 1;
}

const CodeRanges& own_code() {
  static const CodeRanges ranges = [] {
    CodeRanges r;
    dl_iterate_phdr(find_own_code, &r);
    return r;
  }();
  return ranges;
}

struct Walk {
  uintptr_t* out;
  uint32_t max, count;
  bool in_own_code;  // still among libgpumem's frames, which come first
  const CodeRanges* own;
};

_Unwind_Reason_Code step(_Unwind_Context* context, void* arg) {
  Walk& w = *static_cast<Walk*>(arg);
  const uintptr_t pc = _Unwind_GetIP(context);
  if (pc == 0) return _URC_END_OF_STACK;
  if (w.in_own_code && w.own->contains(pc)) return _URC_NO_REASON;
  w.in_own_code = false;
  w.out[w.count++] = pc;
  return w.count == w.max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

// The recording whose caller-frames callback this thread is in; one at a time.
thread_local const void* calling = nullptr;
// The text the callback writes, kept for the thread's next capture.
thread_local std::vector<char> caller_text;

std::string cut(std::string_view s) { return std::string(s.substr(0, kMaxText)); }

std::string demangled(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = cut(status == 0 && d ? d : name);
  std::free(d);
  return out;
}

// A definition's bytes at most, beside its strings.
constexpr size_t kDefinitionBytes = 2 + 4 * kMaxVarintBytes;

}  // namespace

void capture_native(Captured& out, uint32_t max_frames) noexcept {
  Walk w{out.native, std::min(max_frames, kMaxFrames), 0, true, &own_code()};
  _Unwind_Backtrace(step, &w);
  out.native_count = w.count;
}

void capture_caller(Captured& out, const Options& options, const void* owner) noexcept {
  if (calling) return;  // an allocation the callback makes: its frames would call it again
  try {
    caller_text.resize(size_t{options.max_frames} * 512);
  } catch (...) {
    return;
  }
  calling = owner;
  const size_t n =
      std::min(options.caller_frames(caller_text.data(), caller_text.size(), options.caller_data), caller_text.size());
  calling = nullptr;
  std::string_view text(caller_text.data(), n);
  text = text.substr(0, text.find('\0'));  // a C string's end, where the callback wrote one
  while (!text.empty() && out.caller_count < options.max_frames) {
    const size_t end = std::min(text.find('\n'), text.size());
    if (end > 0) out.caller[out.caller_count++] = text.substr(0, std::min(end, kMaxText));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
}

bool inside_caller_frames(const void* owner) noexcept { return calling == owner; }

Symbol symbolize(uintptr_t address) {
  Symbol s;
  s.address = address;
  Dl_info info{};
  // A return address is just past its call, which may be its function's last instruction: the
  // call's own last byte names the function.
  if (address == 0 || dladdr(reinterpret_cast<void*>(address - 1), &info) == 0) return s;
  if (info.dli_fname) s.module = cut(info.dli_fname);
  s.base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  if (info.dli_sname && info.dli_saddr) {
    s.name = demangled(info.dli_sname);
    s.symbol_offset = address - reinterpret_cast<uintptr_t>(info.dli_saddr);
  }
  return s;
}

bool FrameTable::frame_ids(const Captured& c, uint64_t* ids) const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < c.native_count; ++i) {
    const auto it = native_.find(c.native[i]);
    if (it == native_.end()) return false;
    ids[n++] = it->second;
  }
  for (uint32_t i = 0; i < c.caller_count; ++i) {
    const auto it = caller_.find(c.caller[i]);
    if (it == caller_.end()) return false;
    ids[n++] = it->second;
  }
  return true;
}

uint64_t FrameTable::find(const Captured& c) const {
  uint64_t ids[2 * kMaxFrames];
  if (!frame_ids(c, ids)) return 0;
  const auto it = stacks_.find(key(ids, c.native_count + c.caller_count));
  return it == stacks_.end() ? 0 : it->second;
}

std::vector<uintptr_t> FrameTable::unknown_native(const Captured& c) const {
  std::vector<uintptr_t> out;
  for (uint32_t i = 0; i < c.native_count; ++i)
    if (!native_.count(c.native[i]) && std::find(out.begin(), out.end(), c.native[i]) == out.end())
      out.push_back(c.native[i]);
  return out;
}

// Each definition is entered in its table before its bytes are written, and the bytes need no
// allocation (room was made): a table that cannot grow leaves nothing half-written.
uint64_t FrameTable::define_native(uintptr_t address, const Symbol& symbol, std::vector<unsigned char>& out) {
  uint64_t module = 0;
  if (symbol.base) {
    const auto it = modules_.find(symbol.base);
    if (it != modules_.end()) {
      module = it->second;
    } else {
      modules_.emplace(symbol.base, module_count_ + 1);
      module = ++module_count_;
      out.push_back(static_cast<unsigned char>(Definition::kModule));
      put_varint(out, symbol.base);
      put_string(out, symbol.module);
    }
  }
  native_.emplace(address, frames_ + 1);
  out.push_back(static_cast<unsigned char>(Definition::kFrame));
  out.push_back(GPUMEM_TRACE_FRAME_NATIVE);
  put_varint(out, address);
  put_varint(out, module);
  put_varint(out, symbol.name.empty() ? 0 : symbol.symbol_offset);
  put_string(out, symbol.name);
  return ++frames_;
}

uint64_t FrameTable::define_caller(std::string_view text, std::vector<unsigned char>& out) {
  caller_.emplace(std::string(text), frames_ + 1);
  out.push_back(static_cast<unsigned char>(Definition::kFrame));
  out.push_back(GPUMEM_TRACE_FRAME_CALLER);
  put_string(out, text);
  return ++frames_;
}

uint64_t FrameTable::define(const Captured& c, const std::vector<Symbol>& symbols, std::vector<unsigned char>& out,
                            size_t after) {
  const uint32_t count = c.native_count + c.caller_count;
  size_t room = after + kDefinitionBytes + count * kMaxVarintBytes + c.native_count * kDefinitionBytes;
  for (const Symbol& s : symbols) room += 2 * kDefinitionBytes + s.name.size() + s.module.size();
  for (uint32_t i = 0; i < c.caller_count; ++i) room += kDefinitionBytes + c.caller[i].size();
  if (out.capacity() - out.size() < room) out.reserve(out.size() + room);

  uint64_t ids[2 * kMaxFrames];
  uint32_t n = 0;
  for (uint32_t i = 0; i < c.native_count; ++i) {
    const uintptr_t pc = c.native[i];
    if (const auto it = native_.find(pc); it != native_.end()) {
      ids[n++] = it->second;
      continue;
    }
    const auto s = std::find_if(symbols.begin(), symbols.end(), [&](const Symbol& x) { return x.address == pc; });
    ids[n++] = define_native(pc, s != symbols.end() ? *s : Symbol{pc, 0, 0, {}, {}}, out);
  }
  for (uint32_t i = 0; i < c.caller_count; ++i) {
    const auto it = caller_.find(c.caller[i]);
    ids[n++] = it != caller_.end() ? it->second : define_caller(c.caller[i], out);
  }
  if (const auto it = stacks_.find(key(ids, n)); it != stacks_.end()) return it->second;
  stacks_.emplace(std::string(key(ids, n)), stack_count_ + 1);
  out.push_back(static_cast<unsigned char>(Definition::kStack));
  put_varint(out, n);
  for (uint32_t i = 0; i < n; ++i) put_varint(out, ids[i]);
  return ++stack_count_;
}

}  // namespace gpumem::trace
