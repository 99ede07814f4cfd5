"""Offline stand-in for @rules_cc//cc:defs.bzl (Bazel 4.2.3).

Re-exports Bazel's native C++/ObjC rules. Every rule gets the migration tag
that the real rules_cc adds, so --incompatible_load_cc_rules_from_bzl works.
"""

_MIGRATION_TAG = "__CC_RULES_MIGRATION_DO_NOT_USE_WILL_BREAK__"

def _add_tags(attrs):
    if "tags" in attrs and attrs["tags"] != None:
        attrs["tags"] = attrs["tags"] + [_MIGRATION_TAG]
    else:
        attrs["tags"] = [_MIGRATION_TAG]
    return attrs

def cc_binary(**attrs):
    native.cc_binary(**_add_tags(attrs))

def cc_test(**attrs):
    native.cc_test(**_add_tags(attrs))

def cc_library(**attrs):
    native.cc_library(**_add_tags(attrs))

def cc_import(**attrs):
    native.cc_import(**_add_tags(attrs))

def cc_proto_library(**attrs):
    native.cc_proto_library(**_add_tags(attrs))

def fdo_prefetch_hints(**attrs):
    native.fdo_prefetch_hints(**_add_tags(attrs))

def fdo_profile(**attrs):
    native.fdo_profile(**_add_tags(attrs))

def cc_toolchain(**attrs):
    native.cc_toolchain(**_add_tags(attrs))

def cc_toolchain_suite(**attrs):
    native.cc_toolchain_suite(**_add_tags(attrs))

def objc_library(**attrs):
    native.objc_library(**_add_tags(attrs))

def objc_import(**attrs):
    native.objc_import(**_add_tags(attrs))
