// Giving back the stack pages a request used. Every HTTP thread has an 8 MiB stack; a request that recurses
// deeply (a chat template at the interpreter's depth limit, a JSON body at the parser's) leaves its pages
// resident for the thread's life, so under hostile load the server's resident size climbs towards
// threads x deepest use (256 x up to a few MiB) without any leak. Called after each request.
#pragma once

namespace cachet {

// Releases (MADV_DONTNEED) the pages of the calling thread's stack below the current frame, keeping a margin.
// A no-op where the stack's bounds cannot be read.
void release_unused_stack();

}  // namespace cachet
