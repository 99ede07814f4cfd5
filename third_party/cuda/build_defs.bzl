"""cuda_library: compile .cu files with nvcc, only under --config=cuda.

    load("//third_party/cuda:build_defs.bzl", "cuda_library")

    cuda_library(
        name = "kernels",
        srcs = ["kernels.cu"],     # .cu (device + host code), compiled by nvcc
        hdrs = ["kernels.h"],      # plain C++ headers for callers
        deps = ["//core:tensor"],  # cc_library deps (headers visible to nvcc)
        copts = ["-lineinfo"],     # extra nvcc flags (host flags: -Xcompiler)
    )

With `--config=cuda` (i.e. --define=tandem_cuda=1, see //:cuda_enabled):
each .cu becomes a position-independent object via nvcc (C++17, -O3,
sm_90 SASS + compute_90 PTX, -Xcompiler -fPIC, host compiler from
@local_cuda//:defs.bzl), the objects are wrapped in a cc_library `name`
that links @local_cuda//:cudart, and `TANDEM_WITH_CUDA=1` is defined for
`name` and everything depending on it.

Without it, `name` is a header-only cc_library (no objects, no CUDA link
deps, TANDEM_WITH_CUDA not defined) and nvcc is never run: the nvcc target
(`<name>_nvcc_objs`) is tagged manual, so `bazel build //...` skips it.
Callers of functions defined in .cu files must therefore be guarded with
`#if TANDEM_WITH_CUDA` (or live in targets only built with --config=cuda).

Extra keyword arguments (visibility, testonly, alwayslink, linkopts,
defines, ...) go to the cc_library.
"""

load(
    "@local_cuda//:defs.bzl",
    "cuda_found",
    "host_compiler",
    "nvcc_path",
)

CUDA_GENCODE_FLAGS = [
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_90,code=compute_90",
]

# -objtemp: nvcc's intermediate files (.ptx, .cubin, .cpp, ...) beside the object, not in /tmp.
# There they are named after nvcc's process id, which is the same (2) in every linux-sandbox
# action: two compiles at once read and deleted each other's files ("ptxas fatal: Input file
# '/tmp/tmpxft_00000002_00000000-6_reduce.ptx' could not be opened").
NVCC_DEFAULT_FLAGS = [
    "-std=c++17",
    "-O3",
    "-objtemp",
    "-Xcompiler",
    "-fPIC",
] + CUDA_GENCODE_FLAGS

def _stem(path):
    base = path.rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[0] if "." in base else base

def _cuda_objects_impl(ctx):
    if not cuda_found:
        fail("%s: built with --config=cuda, but no CUDA toolkit was found " % ctx.label +
             "(set CUDA_PATH or install to /usr/local/cuda; then `bazel sync --configure`).")

    cc_info = cc_common.merge_cc_infos(
        cc_infos = [d[CcInfo] for d in ctx.attr.deps],
    )
    cc = cc_info.compilation_context

    include_flags = []
    seen_dirs = {}
    for flag, dirs in [
        ("-I", [".", ctx.bin_dir.path, ctx.genfiles_dir.path]),
        ("-I", cc.quote_includes.to_list() + cc.includes.to_list()),
        ("-isystem", cc.system_includes.to_list()),
    ]:
        for d in dirs:
            if d not in seen_dirs:
                seen_dirs[d] = True
                include_flags += [flag, d]
    define_flags = ["-D" + d for d in cc.defines.to_list()]
    define_flags.append("-DTANDEM_WITH_CUDA=1")

    inputs = depset(
        ctx.files.srcs + ctx.files.hdrs,
        transitive = [cc.headers],
    )

    outs = []
    seen = {}
    for src in ctx.files.srcs:
        stem = _stem(src.short_path)
        if stem in seen:
            fail("cuda_library %s: two sources named %s" % (ctx.label, stem))
        seen[stem] = True
        out = ctx.actions.declare_file("_objs/%s/%s.pic.o" % (ctx.attr.base_name, stem))
        args = ctx.actions.args()
        if host_compiler:
            args.add("-ccbin", host_compiler)
        args.add_all(NVCC_DEFAULT_FLAGS)
        args.add_all(include_flags)
        args.add_all(define_flags)
        args.add_all(ctx.attr.copts)
        args.add("-c", src)
        args.add("-o", out)
        ctx.actions.run(
            executable = nvcc_path,
            arguments = [args],
            inputs = inputs,
            outputs = [out],
            mnemonic = "NvccCompile",
            progress_message = "Compiling %s with nvcc" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "base_name": attr.string(mandatory = True),
    },
    doc = "Runs nvcc on each .cu source; outputs PIC object files.",
)

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], **kwargs):
    """C++ library with CUDA sources; see the file docstring.

    Args:
      name: cc_library name.
      srcs: .cu files, compiled by nvcc only under --config=cuda.
      hdrs: headers exported to dependents (also visible to nvcc).
      deps: cc_library dependencies (their headers/includes/defines are
        passed to nvcc; they are linked as usual).
      copts: extra nvcc flags for the .cu files.
      **kwargs: passed to the cc_library.
    """
    objs = name + "_nvcc_objs"
    _cuda_objects(
        name = objs,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_headers"],
        copts = copts,
        base_name = name,
        tags = ["manual"],
        testonly = kwargs.get("testonly", False),
        visibility = ["//visibility:private"],
    )

    defines = kwargs.pop("defines", [])
    native.cc_library(
        name = name,
        srcs = select({
            "//:cuda_enabled": [":" + objs],
            "//conditions:default": [],
        }),
        hdrs = hdrs,
        deps = deps + select({
            "//:cuda_enabled": ["@local_cuda//:cudart"],
            "//conditions:default": [],
        }),
        defines = defines + select({
            "//:cuda_enabled": ["TANDEM_WITH_CUDA=1"],
            "//conditions:default": [],
        }),
        **kwargs
    )
