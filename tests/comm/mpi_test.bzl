"""mpi_test: a Catch2 test binary run by `bazel test` on several MPI ranks."""

def _mpi_tags(n, ranks):
    return ["cpu:2"] + ([] if n == min(ranks) else ["no_asan"])

def mpi_test(name, srcs, deps, ranks = [2, 3], size = "medium", **kwargs):
    """Builds NAME_bin and one sh_test NAME_<n>ranks per entry of ranks.

    Each run is tagged cpu:2 so that two MPI jobs never share the 2 cores. The runs on more
    ranks than the fewest are also tagged no_asan: the sanitizer run of CI (.ci/run) runs each
    binary once, on the fewest ranks, and the plain run runs every count.
    """
    native.cc_binary(
        name = name + "_bin",
        srcs = srcs,
        deps = deps + ["//third_party/catch2:main"],
        testonly = True,
    )
    for n in ranks:
        native.sh_test(
            name = "%s_%dranks" % (name, n),
            size = size,
            srcs = ["//tests/comm:run_mpi.sh"],
            args = [str(n), "$(location :%s_bin)" % name],
            data = [":" + name + "_bin"],
            tags = _mpi_tags(n, ranks),
            **kwargs
        )

def mpi_test_variant(name, test, env, ranks = [2], size = "medium"):
    """An mpi_test's binary run again under other environment variables (another code path).

    NAME_<n>ranks runs :TEST_bin on n ranks for each entry of ranks, with ENV set, tagged as
    mpi_test's runs are.
    """
    for n in ranks:
        native.sh_test(
            name = "%s_%dranks" % (name, n),
            size = size,
            srcs = ["//tests/comm:run_mpi.sh"],
            args = [str(n), "$(location :%s_bin)" % test],
            data = [":" + test + "_bin"],
            env = env,
            tags = _mpi_tags(n, ranks),
        )

def _cuda_build_only():
    return select({
        "//:cuda_enabled": [],
        "//conditions:default": ["//third_party/cuda:cuda_build_only"],
    })

def gpu_mpi_test(name, srcs, deps, ranks = [1, 2], size = "medium", **kwargs):
    """An mpi_test of code on CUDA tensors: NAME_bin and one sh_test NAME_<n>ranks per entry of ranks.

    Built only under --config=cuda (elsewhere Bazel reports the tests as skipped, as
    tests/cuda/gpu_test.bzl does). Its main() is //tests/cuda:gpu_main: on a machine without a
    GPU every rank reports each test case as skipped, with the reason, and succeeds. The ranks
    share the machine's GPUs (cuda:(intra_rank % count)).
    """
    native.cc_binary(
        name = name + "_bin",
        srcs = srcs,
        deps = deps + [
            "//cuda",
            "//tests/cuda:gpu_main",
        ],
        testonly = True,
        target_compatible_with = _cuda_build_only(),
    )
    for n in ranks:
        native.sh_test(
            name = "%s_%dranks" % (name, n),
            size = size,
            srcs = ["//tests/comm:run_mpi.sh"],
            args = [str(n), "$(location :%s_bin)" % name],
            data = [":" + name + "_bin"],
            tags = ["cpu:2", "gpu"],
            target_compatible_with = _cuda_build_only(),
            **kwargs
        )
