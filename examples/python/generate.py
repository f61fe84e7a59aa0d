#!/usr/bin/env python3
"""Generates text with spool's C API from Python through ctypes (no compiled
extension), printing each token as it comes, then tokenizes a text with the
model's tokenizer and renders a chat template if the model has one.

    python3 generate.py [--lib PATH/libspool.so.1] MODEL "Once upon a time" [max_tokens]

Without --lib the library is found as the dynamic loader finds it
(LD_LIBRARY_PATH, the system's library path). Greedy, so the output is the
same on every run. Exit code 0 on success; on failure the status name and
spool_last_error() are printed."""
import argparse
import ctypes
import sys


class ModelOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_threads", ctypes.c_int32), ("n_ctx", ctypes.c_int32),
                ("mem_budget", ctypes.c_char_p), ("kv_type", ctypes.c_char_p), ("convert", ctypes.c_char_p),
                ("cache_policy", ctypes.c_char_p), ("no_speculate", ctypes.c_int32)]


class GenerateParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("max_tokens", ctypes.c_int32), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repeat_penalty", ctypes.c_float), ("seed", ctypes.c_uint64), ("ignore_eos", ctypes.c_int32),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("n_stop", ctypes.c_size_t), ("n_ctx", ctypes.c_int32)]


class GenerateResult(ctypes.Structure):
    _fields_ = [("prompt_tokens", ctypes.c_int32), ("completion_tokens", ctypes.c_int32),
                ("finish_reason", ctypes.c_int)]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t,
                                  ctypes.c_void_p)


class SpoolError(Exception):
    pass


def load(path):
    lib = ctypes.CDLL(path or "libspool.so.1")
    lib.spool_last_error.restype = ctypes.c_char_p
    lib.spool_status_name.restype = ctypes.c_char_p
    lib.spool_status_name.argtypes = [ctypes.c_int]
    lib.spool_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ModelOptions), ctypes.POINTER(ctypes.c_void_p)]
    lib.spool_model_free.argtypes = [ctypes.c_void_p]
    lib.spool_model_tokenizer.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.spool_generate.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(GenerateParams), TOKEN_CALLBACK,
                                   ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(GenerateResult)]
    lib.spool_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    lib.spool_detokenize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_int,
                                     ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    lib.spool_apply_chat_template.argtypes = [ctypes.c_void_p, ctypes.POINTER(ChatMessage), ctypes.c_size_t,
                                              ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_size_t)]
    return lib


def check(lib, status, what):
    if status != 0:
        raise SpoolError("%s: %s: %s" % (what, lib.spool_status_name(status).decode(),
                                         lib.spool_last_error().decode(errors="replace")))


def tokenize(lib, tok, text):
    raw = text.encode()
    n = ctypes.c_size_t(0)
    lib.spool_tokenize(tok, raw, len(raw), 1, 1, None, 0, ctypes.byref(n))  # asks for the count
    ids = (ctypes.c_int32 * n.value)()
    check(lib, lib.spool_tokenize(tok, raw, len(raw), 1, 1, ids, n.value, ctypes.byref(n)), "tokenize")
    return list(ids)


def detokenize(lib, tok, ids):
    arr = (ctypes.c_int32 * len(ids))(*ids)
    n = ctypes.c_size_t(0)
    lib.spool_detokenize(tok, arr, len(ids), 0, None, 0, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value + 1)
    check(lib, lib.spool_detokenize(tok, arr, len(ids), 0, buf, len(buf), ctypes.byref(n)), "detokenize")
    return buf.raw[:n.value].decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", help="path of libspool.so")
    ap.add_argument("model")
    ap.add_argument("prompt")
    ap.add_argument("max_tokens", type=int, nargs="?", default=64)
    args = ap.parse_args()
    lib = load(args.lib)
    if lib.spool_api_version() != 1:
        raise SpoolError("libspool has API version %d, this script speaks 1" % lib.spool_api_version())

    opts = ModelOptions()
    lib.spool_model_options_init(ctypes.byref(opts))
    opts.n_threads = 2
    model = ctypes.c_void_p()
    check(lib, lib.spool_model_open(args.model.encode(), ctypes.byref(opts), ctypes.byref(model)), "open")
    try:
        params = GenerateParams()
        lib.spool_generate_params_init(ctypes.byref(params))
        params.temperature = 0.0
        params.max_tokens = args.max_tokens
        pieces = []

        @TOKEN_CALLBACK
        def on_token(token, text, text_len, user_data):
            piece = ctypes.string_at(text, text_len).decode(errors="replace")
            pieces.append(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
            return 0

        result = GenerateResult()
        sys.stdout.write(args.prompt)
        check(lib, lib.spool_generate(model, args.prompt.encode(), ctypes.byref(params), on_token, None, None,
                                      ctypes.byref(result)), "generate")
        print()
        print("\n[%d prompt tokens, %d generated, finish reason %d]" %
              (result.prompt_tokens, result.completion_tokens, result.finish_reason), file=sys.stderr)

        tok = ctypes.c_void_p()
        check(lib, lib.spool_model_tokenizer(model, ctypes.byref(tok)), "tokenizer")
        ids = tokenize(lib, tok, args.prompt)
        print("tokens: %s" % ",".join(map(str, ids)))
        print("round trip: %r" % detokenize(lib, tok, ids))
        msgs = (ChatMessage * 1)(ChatMessage(b"user", args.prompt.encode()))
        n = ctypes.c_size_t(0)
        status = lib.spool_apply_chat_template(tok, msgs, 1, 1, None, 0, ctypes.byref(n))
        if status == 3:  # SPOOL_ERR_UNSUPPORTED: this model has no chat template
            print("chat template: none")
        else:
            buf = ctypes.create_string_buffer(n.value + 1)
            check(lib, lib.spool_apply_chat_template(tok, msgs, 1, 1, buf, len(buf), ctypes.byref(n)), "chat")
            print("chat prompt: %r" % buf.value.decode())
    finally:
        check(lib, lib.spool_model_free(model), "free")


if __name__ == "__main__":
    try:
        main()
    except SpoolError as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
