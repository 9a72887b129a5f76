#pragma once
// What a streamed layer's weight arrays must satisfy before a kernel may read them (docs/codegen.md, "The
// weight-streaming kernel"): every index inside the buffers the launch gives it. A sha256 vouches for the bytes, not for
// what they index: arrays packed for other parameters, for another layer, or re-sealed after an edit would send the
// kernel past its buffers, where a GPU reads and writes other allocations without a fault.
#include "sparsert/runtime/package.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sparsert {

// Checks `arrays` (the layer's kernel order, as many as its layout takes) against the layer: the slots cover every
// thread slot of the launch; in the row-split layouts every slot's row and entry range lie inside the layer and its
// entries, and every entry's input inside K; in the ELL walk every block's stages, every stage's staged rows and
// segments lie inside their arrays and fit the kernel's tile and walk, and every entry's tile offset is a row its stage
// copied or the tile's zero row; staged rows lie inside the inputs (a convolution's: on its taps' offsets). UserError
// naming `where` and the layer.
void check_stream_arrays(const PackageLayer& pl, const std::vector<std::vector<uint32_t>>& arrays,
                         const std::string& where);

// A streamed layer's arrays read from its package (each file's sha256 checked as it is read), as 4-byte words, and
// checked. UserError naming the file that is empty or not whole words, or the layer.
std::vector<std::vector<uint32_t>> read_stream_arrays(const Package& p, const PackageLayer& pl);

// What can be vouched for without a GPU: every file the manifest lists read once and its sha256 checked, and every
// streamed layer's arrays checked as a GPU load checks them. (load_package has checked the manifest, its digest and
// each file's presence.) UserError on the first problem.
void verify_package(const Package& p);

}  // namespace sparsert
