"""mpi_test: a Catch2 test binary run by `bazel test` on several MPI ranks."""

def mpi_test(name, srcs, deps, ranks = [2, 3], size = "medium", **kwargs):
    """Builds NAME_bin and one sh_test NAME_<n>ranks per entry of ranks.

    Each run is tagged cpu:2 so that two MPI jobs never share the 2 cores.
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
            tags = ["cpu:2"],
            **kwargs
        )
