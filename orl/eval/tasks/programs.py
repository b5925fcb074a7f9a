"""`prog`: tiny straight-line programs; the answer is the value of the queried variable.

Format: prompt = assignments separated by ';' then "<var>?", answer = the value in plain decimal
(leading '-' if negative):
    a=3;b=a+4;a=b-9;a?  -> "-2"
    c=2;b=c+c;c=b+7;c?  -> "11"
Generated programs have 2-3 assignments over variables a, b, c: the first assigns a literal 0-9, each
later one applies + or - to a defined variable and a variable or literal; every intermediate value
stays within [-99, 99]. `ops="+-*"` adds products (and the interpreter always understands `*`), but
the default leaves them out so that a tiny model's budget goes to tracking the variables (what makes
this family interesting for parallel decoding) rather than to a multiplication table up to 99. The verifier runs the program with `run_program`, a small interpreter (the
usual precedence, * over + and -, left-associative) that never calls eval/exec.

Why parallel decoding is non-trivial: the answer's digits are jointly determined by one hidden value
that needs the whole program, executed in order, to compute. When the model is unsure between, say, 27
and 30, committing both digits in one step mixes the marginals into "20" or "37"; the number of digits
and the sign (where EOS goes) are likewise properties of the whole value, not of any single position.
"""
from __future__ import annotations

import random
import re
import string

from .base import Task, parse_int

_TOKEN = re.compile(r"[0-9]+|[a-z]|[-+*]")
_ASSIGN = re.compile(r"([a-z])=(.+)")
_QUERY = re.compile(r"([a-z])\?")


class ProgramError(ValueError):
    pass


def run_program(source: str) -> int:
    """Execute "x=expr;...;v?" and return the value of v."""
    *statements, query = source.split(";")
    q = _QUERY.fullmatch(query)
    if not statements or q is None:
        raise ProgramError(f"expected assignments then '<var>?': {source!r}")
    env: dict[str, int] = {}
    for statement in statements:
        m = _ASSIGN.fullmatch(statement)
        if m is None:
            raise ProgramError(f"not an assignment: {statement!r}")
        env[m[1]] = evaluate(m[2], env)
    if q[1] not in env:
        raise ProgramError(f"queried variable {q[1]!r} is never assigned")
    return env[q[1]]


def evaluate(expr: str, env: dict[str, int]) -> int:
    """Recursive descent over expr := term (('+'|'-') term)* ; term := atom ('*' atom)*."""
    tokens = _TOKEN.findall(expr)
    if "".join(tokens) != expr:
        raise ProgramError(f"bad character in expression {expr!r}")
    pos = 0

    def atom() -> int:
        nonlocal pos
        if pos == len(tokens):
            raise ProgramError(f"expression {expr!r} ends early")
        tok = tokens[pos]
        pos += 1
        if tok.isdigit():
            return int(tok)
        if tok.isalpha():
            if tok not in env:
                raise ProgramError(f"variable {tok!r} used before assignment")
            return env[tok]
        raise ProgramError(f"expected a number or variable in {expr!r}, got {tok!r}")

    def term() -> int:
        nonlocal pos
        value = atom()
        while pos < len(tokens) and tokens[pos] == "*":
            pos += 1
            value *= atom()
        return value

    value = term()
    while pos < len(tokens) and tokens[pos] in ("+", "-"):
        op = tokens[pos]
        pos += 1
        rhs = term()
        value = value + rhs if op == "+" else value - rhs
    if pos != len(tokens):
        raise ProgramError(f"unexpected {tokens[pos]!r} in expression {expr!r}")
    return value


class Prog(Task):
    name = "prog"
    description = "straight-line program a=3;b=a+4;a=b-9;a? ; answer is the printed value"
    why_parallel_is_hard = ("all answer digits, the sign and the length come from one value that needs the "
                            "whole program executed in order")

    def __init__(self, min_assign: int = 2, max_assign: int = 3, variables: str = "abc",
                 max_literal: int = 9, max_abs: int = 99, ops: str = "+-"):
        if (not 1 <= min_assign <= max_assign or not variables or set(variables) - set(string.ascii_lowercase)
                or not ops or set(ops) - set("+-*") or max_abs < max_literal):
            raise ValueError("bad prog knobs: need 1 <= min_assign <= max_assign, lowercase variables, "
                             "ops from '+-*', max_abs >= max_literal")
        self.min_assign, self.max_assign, self.variables = min_assign, max_assign, variables
        self.max_literal, self.max_abs, self.ops = max_literal, max_abs, ops

    def _program(self, rng: random.Random) -> tuple[list[str], dict[str, int]] | None:
        """A random program, or None if some intermediate value leaves [-max_abs, max_abs]."""
        env: dict[str, int] = {}
        statements = []
        for i in range(rng.randint(self.min_assign, self.max_assign)):
            target = rng.choice(self.variables)
            if i == 0:
                expr = str(rng.randint(0, self.max_literal))
            else:
                # One operand is always a variable, so each statement extends the dependency chain.
                var = rng.choice(sorted(env))
                other = rng.choice(sorted(env)) if rng.random() < 0.5 else str(rng.randint(0, self.max_literal))
                left, right = (var, other) if rng.random() < 0.5 else (other, var)
                expr = f"{left}{rng.choice(self.ops)}{right}"
            env[target] = evaluate(expr, env)
            if abs(env[target]) > self.max_abs:
                return None
            statements.append(f"{target}={expr}")
        return statements, env

    def generate(self, rng: random.Random) -> tuple[str, str]:
        while (program := self._program(rng)) is None:
            pass
        statements, env = program
        query = rng.choice(sorted(env))
        return ";".join(statements) + f";{query}?", str(env[query])

    def check(self, prompt: str, output: str) -> bool:
        value = parse_int(output)
        return value is not None and value == run_program(prompt)

