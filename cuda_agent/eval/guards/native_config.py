"""Which statics hold vendor configuration, and nothing a result cache could use (docs/guards.md).

A handle, a descriptor, the algorithm a heuristic chose, a `std::once_flag`, or a std::map /
std::unordered_map of those keyed by shape integers, kept in a static, is configuration: reading
it, returning it by value, copying it, passing it by value is fine. It cannot hold a pointer or a
result while only the vendor writes it: its address goes only into the vendor's creating calls
(`cublasCreate(&h)`, `cublasLtMatmulAlgoGetHeuristic(..., &r, ...)`) or `std::call_once`; it is
assigned only what the vendor made (a local the vendor created, a function or lambda returning
one, a vendor constant); it is never cast, aliased by a reference or pointer, returned by
reference, or handed to a vendor call that reads its settings back (`cublasGetStream`). A static
of such a type that breaks one of these is state, and its finding says why and what to write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuda_agent.eval.guards.native_rules import CONFIG_CONTAINERS, CONFIG_TYPES, INTEGER_TYPES, ONCE_TYPES
from cuda_agent.eval.guards.static_cu import _descendants as _walk  # one tree walk for the guards

_VENDOR = re.compile(r"(?:cublas|cudnn)\w*")
_CONSTANT = re.compile(r"(?:CUBLAS|CUDNN)[A-Z0-9_]*")
# Vendor calls that write a configuration object from the vendor's own choice (creation, heuristics).
_CREATES = re.compile(r"\w*(?:Create|Init|GetHeuristic|Algorithm)\w*")
# Vendor calls that read settings back from a handle or descriptor: the way to fetch what a setter hid there.
_READS_BACK = re.compile(
    r"\w*Get(?:Stream|\w*Mode|Property|Version|\w*Attribute|\w*Descriptor\w*"
    r"|Vector|Matrix)\w*"
)
_NULLS = frozenset({"nullptr", "NULL", "0", "{}"})
_SCOPES = ("function_definition", "lambda_expression")
_READ_METHODS = frozenset({"find", "count", "contains", "end", "cend", "size", "empty", "erase", "clear"})
_WRITE_METHODS = frozenset({"emplace", "try_emplace", "insert", "insert_or_assign"})
_ELEMENT_METHODS = frozenset({"at"})
_CASTS = frozenset({"reinterpret_cast", "static_cast", "const_cast", "dynamic_cast", "bit_cast"})

GETTER = "static cublasHandle_t h = nullptr; if (!h) cublasCreate(&h); return h;"


@dataclass(frozen=True)
class ConfigStatic:
    function: str | None  # enclosing function's name; None at namespace scope
    name: str
    kind: str  # "value", "container" or "once"
    line: int


class Unit:
    """The trees of one object's sources (a .cu and the local headers it includes), read together."""

    def __init__(self, trees, defined: frozenset[str] = frozenset()) -> None:
        self.roots = [t.root_node for t in trees]
        self.defined = defined  # symbols the library's objects define (plain or mangled)
        self.aliases: dict[str, str] = {}
        self.structs: dict[str, list[str]] = {}
        self.enums: set[str] = set()  # enums the sources define: integers, as a key's part
        self.own: set[str] = set()  # functions and macros the sources define: never the vendor's
        self.functions: dict[str, list] = {}  # name -> function_definition / declaration nodes
        for n in self._all():
            if n.type == "alias_declaration":
                self.aliases[_text(n.child_by_field_name("name"))] = _squash(n.child_by_field_name("type"))
            elif n.type == "type_definition":  # not the vendor header's own typedefs, where the build read one
                for d in n.children_by_field_name("declarator"):
                    if not CONFIG_TYPES.fullmatch(_text(d)) and not ONCE_TYPES.fullmatch(_text(d)):
                        self.aliases[_text(d)] = _squash(n.child_by_field_name("type"))
            elif n.type in ("struct_specifier", "class_specifier") and n.child_by_field_name("body") is not None:
                self.structs[_text(n.child_by_field_name("name"))] = [
                    _squash(f.child_by_field_name("type"))
                    for f in n.child_by_field_name("body").children
                    if f.type == "field_declaration" and not _has(f, "function_declarator")
                ]
            elif n.type == "enum_specifier" and n.child_by_field_name("body") is not None:
                if (name := n.child_by_field_name("name")) is not None:
                    self.enums.add(_text(name))
            elif n.type in ("preproc_def", "preproc_function_def"):
                # `#define cublasCreate cublasCreate_v2` (the vendor header's own alias) still names the vendor
                value = _text(n.child_by_field_name("value")).strip()
                alias = n.type == "preproc_def" and _VENDOR.fullmatch(value)
                if not alias:
                    self.own.add(_text(n.child_by_field_name("name")))
            elif n.type == "function_declarator":
                name = _text(n.child_by_field_name("declarator")).split("::")[-1]
                holder = _up(n, ("function_definition", "declaration", "field_declaration"))
                if holder is not None:
                    self.functions.setdefault(name, []).append(holder)
                    if holder.type == "function_definition":
                        self.own.add(name)

    def _all(self):
        stack = list(self.roots)
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children)

    # -- types ----------------------------------------------------------------------------------

    def resolve(self, text: str, depth: int = 0) -> str:
        while text in self.aliases and depth < 8:
            text, depth = self.aliases[text], depth + 1
        return text

    def kind(self, type_text: str) -> str | None:
        text = self.resolve(type_text.removeprefix("const "))
        if CONFIG_TYPES.fullmatch(text):
            return "value"
        if ONCE_TYPES.fullmatch(text):
            return "once"
        m = re.fullmatch(r"(?:std::)?(\w+)<(.*)>", text)
        if m and m.group(1) in CONFIG_CONTAINERS:
            args = _split(m.group(2))
            if len(args) >= 2 and self.integer_key(args[0]) and CONFIG_TYPES.fullmatch(self.resolve(args[1])):
                return "container"
        return None

    def integer_key(self, text: str, depth: int = 0) -> bool:
        text = self.resolve(text.removeprefix("const "))
        if depth > 4:
            return False
        if INTEGER_TYPES.fullmatch(text) or text.removeprefix("enum ") in self.enums or re.match(r"enum\b", text):
            return True
        m = re.fullmatch(r"(?:std::)?(tuple|pair|array)<(.*)>", text)
        if m:
            args = _split(m.group(2))
            if m.group(1) == "array":
                return len(args) == 2 and self.integer_key(args[0], depth + 1)
            return all(self.integer_key(a, depth + 1) for a in args)
        fields = self.structs.get(text)
        return bool(fields) and all(self.integer_key(f, depth + 1) for f in fields)

    # -- the statics ----------------------------------------------------------------------------

    def declared(self) -> list[tuple[ConfigStatic, object, object, list]]:
        """Each static of a configuration type: (static, its declarator, its name's node, where it is used)."""
        out = []
        for n in self._all():
            if n.type != "declaration" or n.child_by_field_name("type") is None:
                continue
            words = {_text(c) for c in n.children if c.type == "storage_class_specifier"}
            function = _up(n, _SCOPES)
            namespace = _up(n, ("namespace_definition",))
            at_namespace_scope = (
                function is None and n.parent is not None and n.parent.type in ("translation_unit", "declaration_list")
            )
            unnamed = namespace is not None and namespace.child_by_field_name("name") is None
            internal = "static" in words or unnamed
            if (
                "thread_local" in words
                or "extern" in words
                or not (("static" in words and function is not None) or (at_namespace_scope and internal))
            ):
                continue
            kind = self.kind(_squash(n.child_by_field_name("type")))
            if kind is None:
                continue
            for d in n.children_by_field_name("declarator"):
                ident = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                if ident is None or ident.type != "identifier":
                    continue  # an array, pointer or reference of handles is not a handle
                static = ConfigStatic(_function_name(function), _text(ident), kind, n.start_point[0] + 1)
                scopes = [function.child_by_field_name("body")] if function is not None else self.roots
                out.append((static, d, ident, scopes))
        return out

    def judge(self) -> list[tuple[ConfigStatic, str | None]]:
        self.names = {s.name: s for s, *_ in self.declared()}
        out = []
        for static, d, ident, scopes in self.declared():
            why = None
            if d.type == "init_declarator" and not self.vendor_made(d.child_by_field_name("value"), set()):
                why = f"line {static.line}: it is initialised with `{_short(d.child_by_field_name('value'))}`"
            out.append((static, why or self.misuse(static.name, static.kind, scopes, ident)))
        return out

    def misuse(self, name: str, kind: str, scopes, declared) -> str | None:
        """Why a use of the configuration variable `name` is not one a handle has (None: every use is)."""
        for scope in scopes:
            stack = [scope]
            while stack:
                n = stack.pop()
                stack.extend(n.children)
                if n.type != "identifier" or n == declared or _text(n) != name or _shadowed(n, name, scope):
                    continue
                if (
                    n.parent is not None
                    and n.parent.type in ("init_declarator", "declaration")
                    and n.parent.child_by_field_name("declarator") == n
                ):
                    continue  # a declaration of its own (a parameter's shadow is caught above)
                why = self.use_problem(n, kind)
                if why:
                    return f"line {n.start_point[0] + 1}: {why}"
        return None

    def use_problem(self, n, kind: str) -> str | None:
        e = _outer(n)
        p = e.parent
        if kind == "pointer":
            return self.pointer_use(e)
        if kind == "iterator":
            return self.iterator_var_use(e)
        if kind == "once":
            call = p.parent if p is not None and p.type == "argument_list" else None
            if call is not None and _callee(call) in ("std::call_once", "call_once") and p.named_children[0] == e:
                return None
            return f"`{_short(p or e)}` uses the once flag outside std::call_once"
        if kind == "container":
            return self.container_use(e)
        return self.value_use(e)

    def value_use(self, e) -> str | None:
        p = e.parent
        text = _short(p)
        if p.type == "argument_list":
            return self.argument_problem(e, p.parent)
        if p.type == "pointer_expression" and _text(p.child_by_field_name("operator")) == "&":
            q = _outer(p)
            if q.parent.type == "argument_list" and self.vendor_call(q.parent.parent):
                callee = _callee(q.parent.parent)
                if _CREATES.fullmatch(callee) and not _READS_BACK.fullmatch(callee):
                    return None
                return f"its address goes to {callee}, which does not create it"
            if q.parent.type == "argument_list":
                return self.pointer_into(q, q.parent.parent)
            return f"its address is taken (`{_short(q.parent)}`): a pointer to it could write anything into it"
        if (
            p.type in ("binary_expression", "condition_clause")
            or (p.type == "unary_expression" and _text(p.child_by_field_name("operator")) == "!")
            or (p.type == "conditional_expression" and p.child_by_field_name("condition") == e)
        ):
            return None
        if p.type == "conditional_expression":
            return self.value_use(p)
        if p.type == "return_statement":
            scope = _up(p, _SCOPES)
            if (
                scope is not None
                and scope.type == "function_definition"
                and scope.child_by_field_name("declarator").type != "function_declarator"
            ):
                return "it is returned by reference or pointer: return it by value"
            if (
                scope is not None
                and scope.type == "lambda_expression"
                and re.search(r"->[^{]*[&*]", _text(scope).split("{", 1)[0])
            ):
                return "a lambda returns it by reference: return it by value"
            return None
        if p.type == "init_declarator" and p.child_by_field_name("value") == e:
            if p.child_by_field_name("declarator").type == "identifier":
                return None  # a copy
            return f"`{text}` binds a reference or pointer to it: copy it by value instead"
        if p.type == "assignment_expression":
            if p.child_by_field_name("right") == e:
                return None  # copied out
            if _text(p.child_by_field_name("operator")) == "=" and self.vendor_made(
                p.child_by_field_name("right"), set()
            ):
                return None
            return f"`{text}` assigns it something the vendor did not make"
        if p.type == "field_expression" and p.child_by_field_name("argument") == e:
            if _text(p.child_by_field_name("operator")) == "->":
                return f"`{text}`: it is not a pointer"
            return self.value_use(p)
        if p.type == "subscript_expression" and p.child_by_field_name("argument") == e:
            return self.value_use(p)  # an element of a local array of results
        if p.type in ("cast_expression",) or (p.type == "call_expression" and _callee(p) in _CASTS):
            return f"`{text}` casts it: a cast makes it a place for any pointer or value"
        return f"`{text}` is not a use a handle has"

    def argument_problem(self, e, call) -> str | None:
        callee = _callee(call)
        if callee in _CASTS or callee.split("::")[-1] in _CASTS:
            return f"`{_short(call)}` casts it: a cast makes it a place for any pointer or value"
        if self.cache_call(call):
            return None  # emplace/insert copy it into the cache
        if self.vendor_call(call):
            if _READS_BACK.fullmatch(callee):
                return f"{callee} reads a setting back from it: set what you need on every call instead"
            return None
        param = self.parameter(call, e)
        if param is None:
            return f"it is passed to {callee or 'a call'}, whose parameter is not declared in kernels/"
        kind, declarator, const = param[:3]
        if kind is not None and (declarator == "identifier" or (declarator == "reference_declarator" and const)):
            return None
        return f"it is passed to {callee} by non-const reference or pointer: pass it by value"

    def pointer_into(self, e, call) -> str | None:
        """`&x` handed to a function of the candidate's: fine when that parameter only reaches vendor calls."""
        param = self.parameter(call, e)
        if param is None or param[0] is None or param[1] != "pointer_declarator":
            return f"its address goes to {_callee(call) or 'a call'}: only the vendor's creating calls may write it"
        ident, fn = param[3], param[4]
        body = fn.child_by_field_name("body") if fn is not None else None
        if body is None:
            return f"its address goes to {_callee(call)}, defined in another file: only vendor calls may write it"
        why = self.misuse(ident, "pointer", [body], None)
        return f"in {_callee(call)}, {why}" if why else None

    def container_use(self, e) -> str | None:
        p = e.parent
        text = _short(p)
        if p.type == "subscript_expression" and p.child_by_field_name("argument") == e:
            return self.value_use(p)
        if p.type == "field_expression" and p.child_by_field_name("argument") == e:
            method, call = _text(p.child_by_field_name("field")), p.parent
            if call.type != "call_expression" or call.child_by_field_name("function") != p:
                return f"`{text}` is not a use of a configuration cache"
            if method in _ELEMENT_METHODS:
                return self.value_use(call)
            if method in _WRITE_METHODS:
                args = call.child_by_field_name("arguments").named_children
                value = args[-1] if args else None
                if value is not None and value.type == "initializer_list" and value.named_children:
                    value = value.named_children[-1]
                if value is None or not self.vendor_made(value, set()):
                    return f"`{_short(call)}` stores something the vendor did not make"
                return self.iterator_use(call)
            if method in _READ_METHODS:
                return self.iterator_use(call) if method == "find" else None
        return f"`{text}` is not a use of a configuration cache: find, emplace, [] and at only"

    def iterator_use(self, call) -> str | None:
        """What `m.find(k)` or `m.emplace(k, v)` gives: compared, read through `->second`, or kept in a local."""
        e = _outer(call)
        p = e.parent
        if p.type == "field_expression" and _text(p.child_by_field_name("field")) == "first":
            e, p = p, p.parent  # emplace(...).first
        if p.type == "field_expression" and _text(p.child_by_field_name("field")) == "second" and e == _outer(call):
            return None  # emplace(...).second: whether it was inserted
        if p.type in ("binary_expression", "expression_statement"):
            return None
        if p.type == "field_expression" and _text(p.child_by_field_name("operator")) == "->":
            return self.value_use(p)
        if (
            p.type == "assignment_expression"
            and p.child_by_field_name("right") == e
            and p.child_by_field_name("left").type == "identifier"
        ):
            return None  # `it = m.emplace(...).first`: `it` is checked where it was declared
        local = p.child_by_field_name("declarator") if p.type == "init_declarator" else None
        if local is None or local.type != "identifier":
            return f"`{_short(p)}` keeps an iterator into the cache other than in a local"
        function = _up(p, _SCOPES)
        why = self.misuse(_text(local), "iterator", [function.child_by_field_name("body")], local)
        return why.split(": ", 1)[1] if why else None  # the caller says the line

    def vendor_call(self, call) -> bool:
        callee = _callee(call)
        if not _VENDOR.fullmatch(callee) or callee in self.own:
            return False
        # declared only: the library must import it, so it is the linked vendor's unless an object defines it
        mangled = f"{len(callee)}{callee}"
        return callee not in self.defined and not any(mangled in d for d in self.defined if d.startswith("_Z"))

    def parameter(self, call, arg):
        """(kind, declarator type, const, name, function) of the parameter `arg` binds to, or None."""
        callee = _callee(call).split("::")[-1]
        args = call.child_by_field_name("arguments").named_children
        index = next((i for i, a in enumerate(args) if a == arg or _inside(arg, a)), None)
        for holder in self.functions.get(callee, []):
            fd = holder if holder.type == "function_declarator" else _first(holder, "function_declarator")
            params = (
                [c for c in fd.child_by_field_name("parameters").named_children if c.type == "parameter_declaration"]
                if fd is not None
                else []
            )
            if index is None or index >= len(params):
                continue
            prm = params[index]
            kind = self.kind(_squash(prm.child_by_field_name("type")))
            decl = prm.child_by_field_name("declarator")
            const = any(_text(c) == "const" for c in prm.children if c.type == "type_qualifier")
            name = decl
            while name is not None and name.type != "identifier":
                name = name.child_by_field_name("declarator") or next(
                    (c for c in name.named_children if c.type == "identifier"), None
                )
            body = holder if holder.type == "function_definition" else None
            return kind, decl.type if decl is not None else "identifier", const, _text(name), body
        return None

    def vendor_made(self, e, seen: set) -> bool:
        """Whether the value of `e` can only be one the vendor made (or null)."""
        if e is None:
            return True
        while e.type == "parenthesized_expression" and e.named_children:
            e = e.named_children[0]
        text = _text(e)
        if (
            e.type in ("null", "true", "false")
            or text in _NULLS
            or (e.type == "initializer_list" and not e.named_children)
        ):
            return True
        if e.type == "identifier":
            if _CONSTANT.fullmatch(text) and text not in self.own:
                return True
            return self.vendor_local(e, seen)
        if e.type == "conditional_expression":
            return all(self.vendor_made(e.child_by_field_name(f), seen) for f in ("consequence", "alternative"))
        if e.type in ("field_expression", "subscript_expression"):
            base = e.child_by_field_name("argument")
            if e.type == "field_expression" and _text(e.child_by_field_name("operator")) == "->":
                return self.iterator_local(base)
            return self.vendor_made(base, seen)
        if e.type == "call_expression":
            fn = e.child_by_field_name("function")
            if fn.type == "lambda_expression":
                return self.returns_vendor_made(fn, seen)
            if fn.type == "field_expression" and _text(fn.child_by_field_name("field")) in _ELEMENT_METHODS:
                return self.is_static_container(fn.child_by_field_name("argument"))
            for holder in self.functions.get(_callee(e).split("::")[-1], []):
                if (
                    holder.type == "function_definition"
                    and holder not in seen
                    and holder.child_by_field_name("declarator").type == "function_declarator"
                    and self.kind(_squash(holder.child_by_field_name("type"))) is not None
                ):
                    return self.returns_vendor_made(holder, seen | {holder})
        return False

    def returns_vendor_made(self, fn, seen: set) -> bool:
        body = fn.child_by_field_name("body")
        returns = [n for n in _walk(body) if n.type == "return_statement" and _up(n, _SCOPES) == fn]
        return bool(returns) and all(r.named_children and self.vendor_made(r.named_children[0], seen) for r in returns)

    def vendor_local(self, ident, seen: set) -> bool:
        """A local variable (or another configuration static) that only the vendor writes."""
        name = _text(ident)
        scope = _up(ident, _SCOPES)
        while scope is not None:
            body = scope.child_by_field_name("body")
            for d in _walk(body):
                if d.type != "declaration" or _up(d, _SCOPES) != scope:
                    continue
                for decl in d.children_by_field_name("declarator"):
                    target = decl.child_by_field_name("declarator") if decl.type == "init_declarator" else decl
                    while target is not None and target.type == "array_declarator":
                        target = target.child_by_field_name("declarator")
                    if target is None or target.type != "identifier" or _text(target) != name:
                        continue
                    if d in seen:
                        return True  # being checked further up
                    kind = self.kind(_squash(d.child_by_field_name("type")))
                    auto = _squash(d.child_by_field_name("type")) == "auto"
                    if kind != "value" and not auto:
                        return False
                    words = {_text(c) for c in d.children if c.type == "storage_class_specifier"}
                    init = decl.child_by_field_name("value") if decl.type == "init_declarator" else None
                    if "static" in words:
                        return name in self.names
                    if not self.vendor_made(init, seen | {d}) or (auto and init is None):
                        return False
                    return self.misuse(name, "value", [body], target) is None
            scope = _up(scope.parent, _SCOPES) if scope.type == "lambda_expression" else None
        return name in self.names and self.names[name].function is None

    def iterator_local(self, base) -> bool:
        """`it` in `it->second`: a local iterator into a configuration cache of this unit."""
        if base is None or base.type != "identifier":
            return False
        scope = _up(base, _SCOPES)
        for d in _walk(scope.child_by_field_name("body")) if scope is not None else []:
            if d.type == "init_declarator" and _text(d.child_by_field_name("declarator")) == _text(base):
                value = d.child_by_field_name("value")
                while value is not None and value.type == "field_expression":
                    value = value.child_by_field_name("argument")
                call = value is not None and value.type == "call_expression"
                fn = value.child_by_field_name("function") if call else None
                return (
                    fn is not None
                    and fn.type == "field_expression"
                    and self.is_static_container(fn.child_by_field_name("argument"))
                )
        return False

    def pointer_use(self, e) -> str | None:
        """A pointer parameter `T* out` that a helper fills for its caller: into vendor calls, or `*out = v`."""
        p = e.parent
        if p.type == "argument_list" and self.vendor_call(p.parent):
            return None if not _READS_BACK.fullmatch(_callee(p.parent)) else f"{_callee(p.parent)} reads it back"
        if p.type == "pointer_expression" and _text(p.child_by_field_name("operator")) == "*":
            q = _outer(p)
            if q.parent.type == "assignment_expression" and q.parent.child_by_field_name("left") == q:
                return (
                    None
                    if self.vendor_made(q.parent.child_by_field_name("right"), set())
                    else f"`{_short(q.parent)}` stores something the vendor did not make"
                )
        if (
            p.type in ("binary_expression", "condition_clause")
            or p.type == "unary_expression"
            and _text(p.child_by_field_name("operator")) == "!"
        ):
            return None
        return f"`{_short(p)}` is not a use the vendor's output pointer has"

    def iterator_var_use(self, e) -> str | None:
        p = e.parent
        if p.type == "binary_expression":
            return None
        if p.type == "field_expression" and _text(p.child_by_field_name("operator")) == "->":
            return self.value_use(p)
        if p.type == "assignment_expression" and p.child_by_field_name("left") == e:
            return (
                None
                if self.vendor_made(_strip_first(p.child_by_field_name("right")), set())
                or self.cache_call(p.child_by_field_name("right"))
                else f"`{_short(p)}` is not into the cache"
            )
        return f"`{_short(p)}` is not a use an iterator into the cache has"

    def cache_call(self, e) -> bool:
        e = _strip_first(e)
        fn = e.child_by_field_name("function") if e is not None and e.type == "call_expression" else None
        return (
            fn is not None
            and fn.type == "field_expression"
            and self.is_static_container(fn.child_by_field_name("argument"))
        )

    def is_static_container(self, n) -> bool:
        return (
            n is not None
            and n.type == "identifier"
            and _text(n) in self.names
            and self.names[_text(n)].kind == "container"
        )


def config_statics(trees, defined: frozenset[str] = frozenset()) -> list[tuple[ConfigStatic, str | None]]:
    """Every static of a configuration type in these trees, with why it is state (None: it is not);
    `defined`: the symbols the library's objects define (a function named like the vendor's is not)."""
    return Unit(trees, defined).judge()


# -- tree helpers ---------------------------------------------------------------------------------


def _strip_first(e):
    if e is not None and e.type == "field_expression" and _text(e.child_by_field_name("field")) == "first":
        return e.child_by_field_name("argument")
    return e


def _text(n) -> str:
    return n.text.decode(errors="replace") if n is not None else ""


def _squash(n) -> str:
    """A type's text with spaces only where C++ needs them: `std::map<std::tuple<int,int>,T>`."""
    text = re.sub(r"\s+", " ", _text(n)).strip()
    return re.sub(r"\s*([<>,:*&])\s*", r"\1", text)


def _short(n) -> str:
    text = re.sub(r"\s+", " ", _text(n))
    return text if len(text) <= 60 else text[:57] + "..."


def _split(args: str) -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(args):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            out.append(args[start:i].strip())
            start = i + 1
    out.append(args[start:].strip())
    return [a for a in out if a]


def _up(n, kinds):
    n = n.parent if n is not None else None
    while n is not None and n.type not in kinds:
        n = n.parent
    return n


def _has(n, kind: str) -> bool:
    return any(c.type == kind for c in _walk(n))


def _first(n, kind: str):
    return next((c for c in _walk(n) if c.type == kind), None)


def _inside(n, ancestor) -> bool:
    while n is not None:
        if n == ancestor:
            return True
        n = n.parent
    return False


def _outer(n):
    while n.parent is not None and n.parent.type == "parenthesized_expression":
        n = n.parent
    return n


def _callee(call) -> str:
    fn = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
    if fn is not None and fn.type == "template_function":
        fn = fn.child_by_field_name("name")
    return re.sub(r"\s+", "", _text(fn))


def _function_name(fn) -> str | None:
    while fn is not None and fn.type == "lambda_expression":
        fn = _up(fn, _SCOPES)
    if fn is None:
        return None
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":  # through `&f()` and `*f()`
        d = d.child_by_field_name("declarator") or next(
            (c for c in d.named_children if c.type.endswith("declarator")), None
        )
    d = d.child_by_field_name("declarator") if d is not None else None
    return _text(d).split("::")[-1] if d is not None else None  # `ns::f` defined out of line: f


def _shadowed(n, name: str, scope) -> bool:
    """Whether a parameter of an enclosing function or lambda below `scope` declares `name` again."""
    f = _up(n, _SCOPES)
    while f is not None and _inside(f, scope) and f != scope.parent:
        params = f.child_by_field_name("declarator")
        params = _first(params, "parameter_list") if params is not None else None
        if params is not None and any(c.type == "identifier" and _text(c) == name for c in _walk(params)):
            return True
        f = _up(f, _SCOPES)
    return False
