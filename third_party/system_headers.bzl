"""system_headers: a repository of a few headers of a system include directory.

new_local_repository(path = "/usr/include") would make the whole of /usr/include the
repository: a compile that runs outside the sandbox (.bazelrc) then finds the C library's own
headers through it, and Bazel reports them as undeclared inclusions. This links only the named
headers (and the BUILD file) into the repository.
"""

def _system_headers_impl(ctx):
    for header in ctx.attr.headers:
        ctx.symlink(ctx.attr.path + "/" + header, header)
    ctx.symlink(ctx.attr.build_file, "BUILD.bazel")

system_headers = repository_rule(
    implementation = _system_headers_impl,
    attrs = {
        "path": attr.string(mandatory = True),
        "headers": attr.string_list(mandatory = True),
        "build_file": attr.label(mandatory = True, allow_single_file = True),
    },
    local = True,
)
