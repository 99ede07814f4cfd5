"""tandem_fuzzer: one fuzz target, as a smoke test and as a fuzzer binary."""

def tandem_fuzzer(name, deps, seconds = 3, iterations = 100000):
    """Defines, for the target in <name>_fuzzer.cc with its seed corpus in corpus/<name>/:

    <name>_fuzz_test: the target linked with the standalone driver (standalone_driver.cc), which
        replays the corpus (regression/ included) and then runs deterministic mutations for
        `seconds` or `iterations`, whichever ends first. Part of `bazel test //tests/fuzz/...`.
    <name>_fuzzer: under --config=fuzz (clang, see .bazelrc), a libFuzzer binary with ASan and
        UBSan (scripts/fuzz.sh runs it); in other builds the same standalone driver, which is
        handy for replaying one input: `bazel run //tests/fuzz:<name>_fuzzer -- FILE`.
    """
    srcs = [name + "_fuzzer.cc"]
    all_deps = deps + [":fuzz_util"]
    corpus = native.glob(["corpus/" + name + "/**"])
    native.cc_test(
        name = name + "_fuzz_test",
        size = "small",
        srcs = srcs,
        deps = all_deps + [":standalone_driver"],
        data = corpus,
        args = [
            "--seconds=%d" % seconds,
            "--iterations=%d" % iterations,
            "tests/fuzz/corpus/" + name,
        ],
    )
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = srcs,
        deps = all_deps + select({
            ":libfuzzer": [],
            "//conditions:default": [":standalone_driver"],
        }),
        linkopts = select({
            ":libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
