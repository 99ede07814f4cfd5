"""gpu_test: a Catch2 test of the CUDA backend.

Built only under --config=cuda (elsewhere Bazel reports it as skipped: it is incompatible
with a build without CUDA). On a machine without a GPU the binary prints why, writes its
test cases as skipped into the JUnit XML and exits 0, so that CI's --config=cuda build has
something to run; on a GPU it runs every case.
"""

def gpu_test(name, srcs, deps = [], size = "medium", **kwargs):
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        deps = deps + [
            "//cuda",
            "//tests/cuda:gpu_main",
        ],
        tags = kwargs.pop("tags", []) + ["gpu"],
        target_compatible_with = select({
            "//:cuda_enabled": [],
            "//conditions:default": ["//third_party/cuda:cuda_build_only"],
        }),
        **kwargs
    )
