"""What the course's solutions need from Python: an allowlist, applied as advice.

Student code (every code cell that is neither read-only nor a test) is compared with what this
course's solutions, lecture cells and correct alternatives use (modules, built-ins, attributes);
lines that go beyond it are named in the grader's log (course/integrity.py), which helps an
instructor reading an appeal. It never changes a grade: since issue 34 every point is decided by
the judge (course/judge.py) outside the student's kernel, so no list has to close the
interpreter, and an honest line the list lacks (`from torch import nn`, `copy.deepcopy`) costs
nothing. docs/grading-safely.md has the table with the reason for each entry.

It is an allowlist: a module, a built-in, an attribute that starts with an underscore, a module
reached through an attribute, is flagged unless this file names it.
"""
import ast
import builtins
import hashlib
import importlib
import importlib.util
import sys
import types

# Modules student code may import, or reach as an attribute (exact dotted names; a trailing
# ".*" admits a package's submodules). Each is used by a solution, a lecture cell or a correct
# alternative of the course.
COURSE_MODULES = {
    "torch": "tensors, autograd, every exercise",
    "torch.nn": "modules and layers (nn.Linear, nn.Module, ...)",
    "torch.nn.functional": "F.softmax, F.scaled_dot_product_attention, F.cross_entropy, ...",
    "torch.nn.init": "initialisation (nn.init.normal_)",
    "torch.nn.utils": "clip_grad_norm_ in training loops",
    "torch.nn.attention": "the SDPA backend table of 03 (sdpa_kernel, SDPBackend)",
    "torch.nn.parameter": "nn.Parameter",
    "torch.optim": "optimizers (AdamW, SGD)",
    "torch.optim.lr_scheduler": "LambdaLR for the warm-up schedule",
    "torch.utils": "the path to torch.utils.data",
    "torch.utils.data": "DataLoader, TensorDataset",
    "torch.utils.flop_counter": "07's FLOP count (FlopCounterMode)",
    "torch.linalg": "norms and matrix functions",
    "torch.special": "special functions (erf, logsumexp)",
    "torch.fft": "frequency-domain views of positional encodings",
    "torch.distributions": "sampling (Categorical)",
    "torch.cuda": "device checks (torch.cuda.is_available)",
    "torch.backends": "device checks (torch.backends.mps)",
    "torch.backends.cuda": "SDPA backend flags",
    "torch.backends.mps": "Apple GPU check",
    "torch.backends.cudnn": "determinism flags",
    "torch.amp": "mixed precision (autocast, GradScaler)",
    "torch.autograd": "torch.autograd.grad in gradient experiments",
    "torch.testing": "torch.testing.assert_close in a student's own checks",
    "torch.random": "torch.random.fork_rng",
    "numpy": "arrays for plots and oracles",
    "numpy.random": "random numbers",
    "numpy.linalg": "matrix functions",
    "numpy.testing": "assertions in a student's own checks",
    "math": "sqrt, log, pi",
    "re": "the BPE pre-tokeniser (06)",
    "collections": "Counter, defaultdict (BPE, vocabularies)",
    "collections.abc": "type checks",
    "itertools": "pairwise, chain, product",
    "functools": "partial, lru_cache, reduce",
    "heapq": "beam search and BPE merges",
    "dataclasses": "configuration records (07)",
    "typing": "type hints",
    "random": "shuffling toy data",
    "time": "timing a run (perf_counter)",
    "statistics": "mean and spread over seeds",
    "copy": "copy.deepcopy of a module (a frozen reference model, a merged layer)",
    "matplotlib": "figures",
    "matplotlib.*": "figures (pyplot, patches, colors, ticker)",
    "seaborn": "heatmaps",
    "seaborn.*": "heatmaps",
    "tqdm": "progress bars",
    "tqdm.*": "progress bars (tqdm.auto)",
}
# What one notebook's own contracts and lecture cells need on top of COURSE_MODULES.
NOTEBOOK_MODULES = {
    "02_multi_head_attention": {"transformers": "BERT's layers", "bertviz": "head and model views",
                                "bertviz.neuron_view": "the neuron view"},
    "03_encoder": {"transformers": "BERT's weights", "bertviz": "attention views"},
    "04_decoder": {"transformers": "pretrained tokenizers"},
    "05_training": {"transformers": "the question-answering demo (pipeline)"},
    "06_gpt": {"transformers": "GPT-2's tokenizer and weights", "bertviz": "the GPT's attention view"},
    "07_experiments": {"transformers": "GPT-2's tokenizer and weights"},
    "08_post_training": {"transformers": "GPT-2's weights", "peft": "the LoRA oracle"},
    "09_reinforcement_learning": {"transformers": "GPT-2's weights (08's GPU path, the log-probability oracle)"},
}
# Attributes and names starting with an underscore that solutions need. Reads only.
DUNDERS = {
    "__init__": "defining a module's constructor and calling super().__init__()",
    "__name__": "naming a class or an error in a printed line",
    "__version__": "printing the torch version",
}
# Built-ins student code may call. Left out on purpose: getattr, setattr, delattr, hasattr, vars,
# dir, globals, locals, eval, exec, compile, open, input, breakpoint, memoryview, __import__,
# help, exit, quit (reflection, dynamic code, files and the interpreter's own machinery).
BUILTINS = {
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "classmethod", "complex", "dict", "divmod", "enumerate", "filter", "float", "format",
    "frozenset", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list",
    "map", "max", "min", "next", "object", "oct", "ord", "pow", "print", "property", "range",
    "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum", "super",
    "tuple", "type", "zip", "NotImplemented", "Ellipsis",
}
# Names IPython puts in the notebook's namespace or its built-ins: they reach the shell itself.
IPYTHON_NAMES = {"get_ipython", "In", "Out", "exit", "quit", "display"}
# A string that names a dunder (`"__code__"`, `"{0.__globals__}"`): functions that take attribute
# names as text (or build classes from a namespace dict) reach attributes through it.
import re as _re
DUNDER_TEXT = _re.compile(r"__\w+__")
# getattr(x, "name") and hasattr(x, "name") with a literal name are x.name: allowed, judged as that
# attribute. With a computed name they are reflection, and refused.
LITERAL_ONLY = {"getattr", "hasattr"}
# Keyword arguments that turn a loader into one that runs code from a file.
UNSAFE_KEYWORDS = {("allow_pickle", True): "np.load with allow_pickle=True unpickles (runs code)",
                   ("weights_only", False): "torch.load with weights_only=False unpickles (runs code)",
                   ("trust_remote_code", True): "trust_remote_code=True runs a model's own code"}
# The interpreter's own objects (frames, code, generators, coroutines, tracebacks) expose these
# public attribute prefixes; through them code reaches every frame and namespace.
_INTERNAL_PREFIXES = ("f_", "gi_", "cr_", "ag_", "tb_", "co_")


def _internal_attributes():
    def gen():
        yield 1

    async def coro():
        return 1

    async def agen():
        yield 1

    objs = [sys._getframe(), gen(), coro(), agen(), gen.__code__]
    try:
        raise ValueError
    except ValueError as e:
        objs.append(e.__traceback__)
    names = {n for o in objs for n in dir(o) if n.startswith(_INTERNAL_PREFIXES)}
    objs[2].close()
    return frozenset(names)


INTERNAL_ATTRIBUTES = _internal_attributes()


# Modules whose functions are not all safe: only these of their attributes may be used.
# typing.get_type_hints (and what calls it) evaluates annotation strings as code.
MODULE_ATTRIBUTES = {
    "typing": "the types and special forms, and cast/overload (no function that evaluates annotations)",
    "functools": "partial, reduce, lru_cache, cache, cached_property, total_ordering, cmp_to_key "
                 "(update_wrapper and wraps copy attributes named by strings; singledispatch "
                 "evaluates annotations)",
    "dataclasses": "dataclass, field, fields, asdict, astuple, replace, is_dataclass (make_dataclass "
                   "builds a class from strings)",
}
FUNCTOOLS = {"partial", "reduce", "lru_cache", "cache", "cached_property", "total_ordering", "cmp_to_key"}
DATACLASSES = {"dataclass", "field", "fields", "asdict", "astuple", "replace", "is_dataclass", "Field",
               "FrozenInstanceError", "MISSING", "KW_ONLY", "InitVar"}


def attribute_allowed(module_name, attr):
    if module_name == "functools":
        return attr in FUNCTOOLS
    if module_name == "dataclasses":
        return attr in DATACLASSES
    if module_name != "typing":
        return True
    value = getattr(sys.modules.get("typing") or importlib.import_module("typing"), attr, None)
    return attr in ("cast", "overload") or not isinstance(value, types.FunctionType)


_METHODS = []


def library_methods():
    """The method names of torch's Tensor and of every nn.Module class (computed once)."""
    if not _METHODS:
        names = set()
        try:
            torch = importlib.import_module("torch")
            classes = [torch.Tensor] + [c for c in vars(torch.nn).values()
                                        if isinstance(c, type) and issubclass(c, torch.nn.Module)]
            for cls in classes:
                names |= {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n, None))
                          and not isinstance(getattr(cls, n, None), type)}
        except Exception:
            pass
        _METHODS.append(frozenset(names))
    return _METHODS[0]


def allowed_modules(assignment=None):
    allowed = set(COURSE_MODULES)
    allowed.update(NOTEBOOK_MODULES.get(assignment, {}))
    return allowed


def module_allowed(name, allowed):
    if name in allowed:
        return True
    parts = name.split(".")
    return any(".".join(parts[:i]) + ".*" in allowed for i in range(1, len(parts)))


# ----------------------------------------------------------------------------- reading cells

def python_source(source):
    """A cell's text as the kernel runs it: IPython's own transforms (magics, `!`, `?`) applied.
    Returns (code, uses_ipython_syntax); code is None when it is not Python even then."""
    try:
        ast.parse(source)
        return source, False
    except SyntaxError:
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        code = TransformerManager().transform_cell(source)
        ast.parse(code)
        return code, True
    except Exception:  # a plain syntax error: the cell fails when it runs, and costs only itself
        return None, False


def _targets(node):
    """Names bound by an assignment target."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)


def _bound_here(body):
    """Names bound directly in a block (not inside nested functions or classes)."""
    names = set()
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.NamedExpr):
            names.update(_targets(node.target))
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return names


def _arguments(args):
    every = args.posonlyargs + args.args + args.kwonlyargs
    every += [a for a in (args.vararg, args.kwarg) if a]
    return {a.arg for a in every}


def _module_imports(tree):
    """name -> dotted module path, for names an import statement binds to a module or to an
    object of a module (resolved later)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = f"{node.module}:{a.name}"
    return out


def _resolve_module(spec):
    """The dotted name of the module a binding refers to, or None when it is not a module."""
    if ":" not in spec:
        return spec
    parent, name = spec.split(":")
    full = f"{parent}.{name}"
    module = sys.modules.get(parent)
    if module is None:
        try:
            module = importlib.import_module(parent)
        except Exception:
            module = None
    if module is not None:
        value = module.__dict__.get(name)
        if isinstance(value, types.ModuleType):
            return value.__name__
        if value is not None:
            return None
    if full in sys.modules:
        return full
    try:
        return full if importlib.util.find_spec(full) is not None else None
    except (ImportError, ValueError, AttributeError):
        return None


def _submodule(module_name, attr):
    """module_name.attr when that attribute is a module (loaded or not yet), else None."""
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except Exception:
            return None
    value = module.__dict__.get(attr)
    if isinstance(value, types.ModuleType):
        return value.__name__
    if value is not None:
        return None
    if hasattr(module, "__path__"):
        try:
            if importlib.util.find_spec(f"{module_name}.{attr}") is not None:
                return f"{module_name}.{attr}"
        except (ImportError, ValueError, AttributeError):
            return None
    return None


# ------------------------------------------------------------------------------ the policy

class _Context:
    """What the read-only cells and the test cells of one notebook define."""

    def __init__(self, read_only, tests, assignment, answer_names=()):
        self.allowed = allowed_modules(assignment)
        self.modules = {}             # name -> module spec, from any cell's imports
        self.module_level = set()     # names any read-only or test cell binds at module level
        defined, variables, read_by_tests = set(), set(), set()
        self.last_read = {}           # read-only variable -> position of the last test reading it
        for item in read_only + tests:
            position, source = item if isinstance(item, tuple) else (None, item)
            code, _ = python_source(source)
            if code is None:
                continue
            tree = ast.parse(code)
            self.modules.update(_module_imports(tree))
            bound = _bound_here(tree.body)
            self.module_level |= bound
            named = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                  ast.ClassDef))}
            imported = {a.asname or a.name.split(".")[0] for n in tree.body
                        if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
            defined |= named | imported
            if item in read_only:
                variables |= bound
            else:
                loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                reads = loads - set(_bound_here([n for n in ast.walk(tree) if isinstance(n, ast.stmt)]))
                read_by_tests |= reads
                for name in reads:
                    last = self.last_read.get(name, -1)
                    self.last_read[name] = float("inf") if position is None else max(last, position)
        # Protected: what read-only and test cells define (functions, classes, imports) and the
        # read-only variables a later test cell reads; except the names the student's answers define.
        self.variables = (variables & read_by_tests) - defined - set(answer_names)
        self.protected = (defined - set(answer_names)) | self.variables
        self._resolved = {}

    def module_of(self, name):
        """The module a name is bound to by an import, or None."""
        if name not in self.modules:
            return None
        spec = self.modules[name]
        if spec not in self._resolved:
            self._resolved[spec] = _resolve_module(spec)
        return self._resolved[spec]


class _Checker(ast.NodeVisitor):
    def __init__(self, ctx, where, student_globals, student_modules, own_private=(), position=None,
                 aliases=(), docstrings=(), parents=None):
        self.ctx, self.where, self.position = ctx, where, position
        self.aliases = set(aliases)          # student names bound to a module's or read-only object
        self.docstrings = set(docstrings)
        self.parents = parents or {}
        self.own_private = set(own_private)   # single-underscore names the student's code defines
        self.globals = student_globals          # module-level names bound by student cells
        self.student_modules = student_modules
        self.scopes = []                        # locals of the enclosing functions
        self.reasons = []

    def flag(self, node, rule, instead=""):
        line = getattr(node, "lineno", "?")
        self.reasons.append(f"{self.where}, line {line}: {rule}" + (f" ({instead})" if instead else ""))

    # --- names and scopes
    def local(self, name):
        return any(name in scope for scope in self.scopes)

    def module_of(self, name):
        if self.local(name):
            return None
        if name in self.student_modules:
            return _resolve_module(self.student_modules[name])
        return self.ctx.module_of(name)

    def check_identifier(self, node, name, store=False):
        if not name.startswith("_") or name == "_":
            return
        if name in DUNDERS and not store:
            return
        if not name.startswith("__") and name in self.own_private:
            return   # a private helper of the student's own (`def _helper`, `self._cache = ...`)
        self.flag(node, f"`{name}` starts with an underscore",
                  "names that start with _ reach the interpreter's internals; only "
                  + ", ".join(sorted(DUNDERS)) + " are allowed")

    def visit_Name(self, node):
        name = node.id
        self.check_identifier(node, name, store=not isinstance(node.ctx, ast.Load))
        if not isinstance(node.ctx, ast.Load):
            return
        module = self.module_of(name)
        if module is not None:
            if not module_allowed(module, self.ctx.allowed):
                self.flag(node, f"uses `{name}` (the module {module}), which answer code may not use",
                          "the course's allowed modules are listed in docs/grading-safely.md")
            elif not getattr(node, "_attribute_base", False):
                self.flag(node, f"uses the module `{name}` as a value",
                          f"use its functions directly, e.g. {name}.something(...)")
            return
        if self.local(name) or name in self.globals or name in self.ctx.module_level:
            return
        if name in BUILTINS or (hasattr(builtins, name) and isinstance(getattr(builtins, name), type)
                                and issubclass(getattr(builtins, name), BaseException)):
            return
        if name in LITERAL_ONLY and getattr(node, "_literal_attribute", False):
            return
        if name in IPYTHON_NAMES:
            self.flag(node, f"uses `{name}`, IPython's own machinery",
                      "answer code works with the notebook's own names only")
        elif hasattr(builtins, name):
            self.flag(node, f"calls the built-in `{name}`, which is not on the course's list",
                      "use attributes and functions by name; getattr, setattr, vars, eval, exec, "
                      "open and friends are not needed by any exercise")
        # any other undefined name is a NameError when it runs, and costs only its own cell

    def visit_Attribute(self, node):
        attr = node.attr
        store = not isinstance(node.ctx, ast.Load)
        self.check_identifier(node, attr, store=store)
        if attr in ("format", "format_map"):
            self._format(node)
        if attr in INTERNAL_ATTRIBUTES:
            self.flag(node, f"`.{attr}` reads the interpreter's frames or code",
                      "no exercise needs frames, code objects or tracebacks")
        # a chain that starts at a module: every module it reaches must be allowed
        chain, base = [attr], node.value
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name):
            base._attribute_base = True
            module = self.module_of(base.id)
            if module is not None and module_allowed(module, self.ctx.allowed):
                self._check_chain(node, module, list(reversed(chain)))
        if store and isinstance(base, ast.Name) and (
                self.module_of(base.id) is not None
                or (base.id in self.ctx.protected and not self.local(base.id))):
            self.flag(node, f"changes `{ast.unparse(node)}`, which belongs to a library or a read-only cell",
                      "give your own objects their own attributes instead of patching shared ones")
        if store and self._replaces_method(node):
            self.flag(node, f"replaces the method `{node.attr}` on `{ast.unparse(node.value)}`, which may be "
                            "a library's class", "give your own classes their own methods; set data attributes only")
        if store and self._shared_root(node):
            self.flag(node, f"changes `{ast.unparse(node)}`, an object that is not the answer's own",
                      "set attributes on `self` or on objects your own code created")
        inner = node.value
        while isinstance(inner, ast.Attribute):   # the rest of the chain was judged above
            if inner.attr in ("format", "format_map"):
                self._format(inner)
            self.check_identifier(inner, inner.attr)
            if inner.attr in INTERNAL_ATTRIBUTES:
                self.flag(inner, f"`.{inner.attr}` reads the interpreter's frames or code",
                          "no exercise needs frames, code objects or tracebacks")
            inner = inner.value
        self.visit(inner)

    def _format(self, node):
        """`.format`/`.format_map` only on a string literal whose fields read no attribute or item."""
        literal = node.value if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str) else None
        if literal is None or any(ch in field for field in _format_fields(literal.value) for ch in ".["):
            self.flag(node, "str.format on a computed format, or with fields that read attributes",
                      "use an f-string")

    def _check_chain(self, node, module, attrs):
        current = module
        for i, attr in enumerate(attrs):
            if attr.startswith("_"):
                return
            if not attribute_allowed(current, attr):
                self.flag(node, f"uses {current}.{attr}", MODULE_ATTRIBUTES.get(current, ""))
                return
            sub = _submodule(current, attr)
            if sub is None:
                return
            if not module_allowed(sub, self.ctx.allowed):
                self.flag(node, f"reaches the module {sub} through `{'.'.join([module] + attrs[:i + 1])}`",
                          "only the course's allowed modules may be used")
                return
            current = sub
        if not getattr(node, "_attribute_base", False):
            self.flag(node, f"uses the module {current} as a value", "use its functions directly")

    def _replaces_method(self, node):
        """`x.all = ...`, `c.forward = ...` on anything but `self`: the names of the methods of
        torch's tensors and modules (an alias, an argument or a loop variable may hold the class
        itself: `for c in [torch.Tensor]: c.all = ...`)."""
        base = node.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        if isinstance(base, ast.Name) and base.id == "self":
            return False
        return node.attr in library_methods()

    def _shared_root(self, node):
        """The base of a store is a call (`type(t).all = ...`) or a name the student bound to a
        library's or a read-only cell's object (`T = torch.Tensor; T.all = ...`)."""
        base = node.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        if isinstance(base, ast.Call):
            return True
        return isinstance(base, ast.Name) and base.id in self.aliases and not self.local(base.id)

    def visit_Subscript(self, node):
        if not isinstance(node.ctx, ast.Load):
            base = node.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name) and (self.module_of(base.id) is not None or (
                    base.id in self.ctx.protected and not self.local(base.id))):
                self.flag(node, f"changes `{ast.unparse(node)}`, which belongs to a library or a read-only cell",
                          "keep your own copies of shared data")
        self.generic_visit(node)

    # --- bindings
    def visit_Import(self, node):
        for a in node.names:
            self._check_import(node, a.name)
            self.check_identifier(node, a.asname or a.name, store=True)

    def visit_ImportFrom(self, node):
        if node.level or not node.module:
            self.flag(node, "a relative import", "import the course's allowed modules by name")
            return
        self._check_import(node, node.module)
        for a in node.names:
            if a.name == "*":
                self.flag(node, f"`from {node.module} import *`", "import the names you use")
                continue
            self.check_identifier(node, a.name)
            self.check_identifier(node, a.asname or a.name, store=True)
            if not attribute_allowed(node.module, a.name):
                self.flag(node, f"imports {node.module}.{a.name}", MODULE_ATTRIBUTES.get(node.module, ""))
            sub = _resolve_module(f"{node.module}:{a.name}")
            if sub is not None and not module_allowed(sub, self.ctx.allowed):
                self.flag(node, f"imports the module {sub}", "only the course's allowed modules may be used")

    def _check_import(self, node, name):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if not module_allowed(prefix, self.ctx.allowed):
                self.flag(node, f"imports {prefix}, which is not on the course's list of modules",
                          "allowed: " + ", ".join(sorted(m for m in self.ctx.allowed if "*" not in m)[:12]) + ", ...")
                return

    def _function(self, node):
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        args = node.args
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(default)
        for a in args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
            self.check_identifier(a, a.arg, store=True)
            if a.annotation is not None:
                self._annotation(a.annotation)
                self.visit(a.annotation)
        if getattr(node, "returns", None) is not None:
            self._annotation(node.returns)
            self.visit(node.returns)
        scope = _arguments(args)
        body = node.body if isinstance(node.body, list) else [node.body]
        scope |= _bound_here(body)
        for stmt in body:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Global):
                    scope -= set(sub.names)
        self.scopes.append(scope)
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()

    def visit_FunctionDef(self, node):
        if not self.scopes:
            self._rebinds(node, node.name)
        self.check_identifier(node, node.name, store=node.name != "__init__")
        self._function(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._function(node)

    def visit_ClassDef(self, node):
        if not self.scopes:
            self._rebinds(node, node.name)
        self.check_identifier(node, node.name, store=True)
        for expr in node.bases + [k.value for k in node.keywords] + node.decorator_list:
            self.visit(expr)
        # a class body is a scope of its own for the names it binds
        self.scopes.append(_bound_here(node.body))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    def _comprehension(self, node):
        names = set()
        for gen in node.generators:
            names |= set(_targets(gen.target))
        self.scopes.append(names)
        self.generic_visit(node)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def _rebinds(self, node, name):
        if name in self.ctx.variables and self.position is not None \
                and self.position > self.ctx.last_read.get(name, float("inf")):
            return   # no test reads the read-only value after this cell
        if name in self.ctx.protected:
            self.flag(node, f"rebinds `{name}`, which a read-only cell defines",
                      "choose another name for your own variable")
        elif hasattr(builtins, name):
            self.flag(node, f"rebinds the built-in `{name}`", "choose another name")

    def visit_Global(self, node):
        for name in node.names:
            self._rebinds(node, name)
            self.check_identifier(node, name, store=True)

    visit_Nonlocal = visit_Global

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Name) and f.id in LITERAL_ONLY and not self.local(f.id) \
                and 2 <= len(node.args) <= 3 and not node.keywords \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            attr = node.args[1].value   # getattr(x, "name") is x.name: judged as that attribute
            f._literal_attribute = True
            self.check_identifier(node, attr)
            if attr in INTERNAL_ATTRIBUTES or not attr.isidentifier():
                self.flag(node, f"`{f.id}(..., {attr!r})` reads an internal attribute", "")
        if isinstance(f, ast.Name) and f.id == "type" and not self.local("type"):
            if len(node.args) != 1 or node.keywords:
                self.flag(node, "type() with more than one argument builds a class at run time",
                          "define classes with `class`")
            elif not (isinstance(self.parents.get(node), ast.Attribute) and self.parents[node].attr == "__name__"
                      or isinstance(self.parents.get(node), ast.Compare)):
                self.flag(node, "type(x) used as a value (it is the class itself, and type(type) builds classes)",
                          "use isinstance(x, ...), or type(x).__name__ to print it")
        for kw in node.keywords:
            if kw.arg is not None:
                self.check_identifier(kw, kw.arg, store=True)
            unsafe = {k for k, _ in UNSAFE_KEYWORDS}
            if kw.arg in unsafe and not (isinstance(kw.value, ast.Constant)
                                         and (kw.arg, kw.value.value) not in UNSAFE_KEYWORDS):
                self.flag(node, UNSAFE_KEYWORDS.get((kw.arg, not (kw.arg == "weights_only")),
                                                    f"{kw.arg} must be a safe constant"), "load tensors with safetensors")
        self.generic_visit(node)

    def _annotation(self, annotation):
        """A string annotation is code that typing.get_type_hints (and functools.singledispatch)
        evaluates: only a plain dotted name (a forward reference) is allowed."""
        for sub in ast.walk(annotation):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and not all(
                    part.isidentifier() and not part.startswith("_") for part in sub.value.split(".")):
                self.flag(sub, "a string annotation that is not a plain name is code run later",
                          "annotate with the type itself, or a name such as \"Tensor\"")

    def visit_arg(self, node):
        if node.annotation is not None:
            self._annotation(node.annotation)

    def visit_AnnAssign(self, node):
        self._annotation(node.annotation)
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and DUNDER_TEXT.search(node.value) and node not in self.docstrings:
            self.flag(node, f"the text {node.value[:40]!r} names an underscore attribute",
                      "strings that name __attributes__ are how code reaches them without the syntax")

    def visit_ExceptHandler(self, node):
        if node.name:
            self.check_identifier(node, node.name, store=True)
            if not self.scopes:
                self._rebinds(node, node.name)
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        if not self.scopes:
            for name in _targets(node.target):
                self._rebinds(node, name)
        self.generic_visit(node)


def _format_fields(text):
    import string
    try:
        return [field for _, field, _, _ in string.Formatter().parse(text) if field]
    except ValueError:
        return ["["]


def _top_level_stores(tree):
    """Module-level names a cell binds, each with its node (for the rebinding rule)."""
    out = []
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.append((node, node.id))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out.append((node, a.asname or a.name.split(".")[0]))
        stack.extend(ast.iter_child_nodes(node))
    return out


def violations(student, read_only, tests=(), assignment=None, answer_names=()):
    """Why this student code may not be graded automatically (empty when it may).

    student: [(where, source)] or [(where, source, position)] of the cells the student may edit;
    read_only: sources of the read-only cells (set-up, check helpers, given code); tests: sources
    (or (position, source)) of the test cells; positions order the cells, so that a read-only value
    may be reused after the last test that reads it; answer_names: what the answer cells are meant
    to define (they may replace given code)."""
    ctx = _Context(list(read_only), list(tests), assignment, answer_names)
    parsed, reasons = [], []
    for item in student:
        where, source, position = item if len(item) == 3 else (*item, None)
        code, ipython = python_source(source)
        if ipython:
            reasons.append(f"{where}: uses IPython syntax (a magic `%`, a shell escape `!` or `?` help), "
                           "which answer cells may not (write plain Python)")
        if code is not None:
            parsed.append((where, ast.parse(code), position))
    student_globals, student_modules, own_private = set(), {}, set()
    for _, tree, _ in parsed:
        student_globals |= _bound_here(tree.body)
        student_modules.update({k: v for k, v in _module_imports(tree).items()})
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                student_globals |= set(node.names)
            name = None
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = node.name
            elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
                name = node.id if isinstance(node, ast.Name) else node.attr
            elif isinstance(node, ast.arg):
                name = node.arg
            if name and name.startswith("_") and not name.startswith("__"):
                own_private.add(name)
    aliases = set()
    for _, tree, _ in parsed:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                root = node.value
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if isinstance(root, ast.Name) and (root.id in ctx.modules or root.id in ctx.protected
                                                   or root.id in student_modules) \
                        or isinstance(root, ast.Call) and getattr(root.func, "id", None) == "type":
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        aliases.update(_targets(t))
    for where, tree, position in parsed:
        docstrings = {body[0].value for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      for body in [n.body] if body and isinstance(body[0], ast.Expr)
                      and isinstance(body[0].value, ast.Constant)}
        parents = {child: n for n in ast.walk(tree) for child in ast.iter_child_nodes(n)}
        checker = _Checker(ctx, where, student_globals, student_modules, own_private, position,
                           aliases, docstrings, parents)
        for node, name in _top_level_stores(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and \
                    _module_imports(node).get(name) == ctx.modules.get(name):
                continue   # importing again what a read-only cell imports, under the same name
            checker._rebinds(node, name)
        checker.visit(tree)
        reasons.extend(checker.reasons)
    return list(dict.fromkeys(reasons))
