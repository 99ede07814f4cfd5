"""Offline stand-in for @rules_java//java:defs.bzl (Bazel 4.2.3).

Re-exports Bazel's native Java rules, adding the same migration tag as the
real rules_java.
"""

_MIGRATION_TAG = "__JAVA_RULES_MIGRATION_DO_NOT_USE_WILL_BREAK__"

def _add_tags(attrs):
    if "tags" in attrs and attrs["tags"] != None:
        attrs["tags"] = attrs["tags"] + [_MIGRATION_TAG]
    else:
        attrs["tags"] = [_MIGRATION_TAG]
    return attrs

def java_binary(**attrs):
    native.java_binary(**_add_tags(attrs))

def java_import(**attrs):
    native.java_import(**_add_tags(attrs))

def java_library(**attrs):
    native.java_library(**_add_tags(attrs))

def java_lite_proto_library(**attrs):
    native.java_lite_proto_library(**_add_tags(attrs))

def java_proto_library(**attrs):
    native.java_proto_library(**_add_tags(attrs))

def java_test(**attrs):
    native.java_test(**_add_tags(attrs))

def java_package_configuration(**attrs):
    native.java_package_configuration(**_add_tags(attrs))

def java_plugin(**attrs):
    native.java_plugin(**_add_tags(attrs))

def java_runtime(**attrs):
    native.java_runtime(**_add_tags(attrs))

def java_toolchain(**attrs):
    native.java_toolchain(**_add_tags(attrs))
