// Objects whose memory the process keeps: a handle's object that is never freed, so that a stale
// handle finds memory marked dead rather than memory reused for something else.
#pragma once

namespace gpumem {

// Keeps p reachable for the rest of the process, so that leak checkers do not report it. Never
// fails: without host memory to list it, p is kept all the same, only unlisted.
void keep_forever(void* p) noexcept;

}  // namespace gpumem
