// Built-ins of the Jinja-subset template engine: filters (x | trim), tests
// (x is defined), methods of strings, dicts and lists (s.startswith('a')), and
// global functions (range, namespace, raise_exception, strftime_now, dict).
// Errors are thrown as BuiltinError; the evaluator adds the source location.
#pragma once

#include <stdexcept>
#include <string>

#include "text/jinja_value.h"

namespace spool::jinja {

struct BuiltinError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The running render's byte budget (TemplateOptions::max_output_bytes):
// whatever builds a string or list charges its size first, and this throws
// BuiltinError once the render has built more than its budget. No-op outside a render.
void charge_bytes(uint64_t n);
// charge_bytes(a * b), saturating instead of overflowing.
void charge_product(uint64_t a, uint64_t b);
// The most items range() makes.
inline constexpr int64_t kMaxRangeItems = 1 << 20;

// Throws BuiltinError for an unknown filter or bad arguments.
Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool has_filter(const std::string& name);
// Throws BuiltinError for an unknown test.
bool apply_test(const std::string& name, const Value& v, CallArgs& args);
// A method call obj.name(args); false if obj's kind has no such method.
bool call_method(const Value& obj, const std::string& name, CallArgs& args, Value& result);
// The global functions, as a dict of name -> function.
Dict global_functions();

// Python's `in`: substring, list membership or dict key.
bool contains(const Value& container, const Value& item);
// Python's ordering (<) of numbers, strings and lists; throws BuiltinError otherwise.
bool less_than(const Value& a, const Value& b);
// Argument i (positional) or `name` (keyword), else `fallback`.
Value arg(CallArgs& args, size_t i, const char* name, Value fallback = Value());

// Python string operations (ASCII case mapping; UTF-8 passes through).
std::string strip(const std::string& s, const Value& chars, bool left, bool right);
std::string to_upper(std::string s);
std::string to_lower(std::string s);
std::string capitalize(const std::string& s);
std::string python_title(const std::string& s);
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count = -1);

}  // namespace spool::jinja
