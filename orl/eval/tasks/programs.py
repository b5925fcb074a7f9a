"""`prog`: tiny straight-line programs; the answer is what the program prints.

Two forms (the interpreter runs both; the generator's default is `echo`):
    echo:  "echo a=3;b=a+4;a=b-9:" -> "a=3,b=7,a=-2"   every assignment prints its variable and the
                                                       value it assigns (a REPL echo), joined by ','
    query: "a=3;b=a+4;a=b-9;a?"    -> "-2"       the program prints only the queried variable
Values are in plain decimal (leading '-' if negative). Generated programs (the defaults) have 3-5
assignments to variables a, b, c: the first assigns a literal 0-9, each later one adds or subtracts a
literal 0-9 to or from the variable the previous statement assigned (`operands="chain"`), and every
value stays within [0, 99] (`signed=False`). Answers are 11-29 characters (one or two blocks). The
verifier runs the program with `program_output`, a small interpreter (the usual precedence, * over +
and -, left-associative) that never calls eval/exec.

Why `echo` is the default: printing only the last value asks a tiny model to run the whole chain of
dependent additions inside one forward pass; echoing puts each intermediate value in the output, named
("a=3,b=7"), so each printed value is one addition away from what is already written, like a trace.
Why the chain and non-negative values: with any defined variable as operand and negative values
(`operands="any", signed=True`) a 6-layer model's errors are lookups (the most recent value read
instead of the named one) and lost minus signs; those knobs remain for harder suites. `ops="+-*"`
adds products, but the default leaves them out so that a tiny model's budget goes to tracking the
values (what makes this family interesting for parallel decoding) rather than to a multiplication
table up to 99. The measurements behind these choices: docs/history/CODE-NOTES.md.

Why parallel decoding is non-trivial: each printed value depends on the value printed before it
(b=a+4 needs a's value, itself the sum of every earlier step), and the digits of one value are
jointly determined: when the model is unsure between, say, 27 and 30, committing both digits in one
step mixes the marginals into "20" or "37". Where the k-th value sits in the string depends on the
widths of all earlier values, so a position cannot know which value it holds without its left context.
"""
from __future__ import annotations

import random
import re
import string

from .base import Task

_TOKEN = re.compile(r"[0-9]+|[a-z]|[-+*]")
_ASSIGN = re.compile(r"([a-z])=(.+)")
_QUERY = re.compile(r"([a-z])\?")
_ECHO = re.compile(r"echo (.+):")


class ProgramError(ValueError):
    pass


def execute(statements: list[str]) -> tuple[list[int], dict[str, int]]:
    """Run assignments in order -> (the value each one assigned, the final variables)."""
    env: dict[str, int] = {}
    values = []
    for statement in statements:
        m = _ASSIGN.fullmatch(statement)
        if m is None:
            raise ProgramError(f"not an assignment: {statement!r}")
        env[m[1]] = evaluate(m[2], env)
        values.append(env[m[1]])
    return values, env


def run_program(source: str) -> int:
    """Execute "x=expr;...;v?" and return the value of v."""
    *statements, query = source.split(";")
    q = _QUERY.fullmatch(query)
    if not statements or q is None:
        raise ProgramError(f"expected assignments then '<var>?': {source!r}")
    _, env = execute(statements)
    if q[1] not in env:
        raise ProgramError(f"queried variable {q[1]!r} is never assigned")
    return env[q[1]]


def program_output(source: str) -> str:
    """What a program prints: "echo <assignments>:" echoes every assignment as name=value (joined by
    ','), the query form "<assignments>;v?" prints v."""
    if m := _ECHO.fullmatch(source):
        statements = m[1].split(";")
        values, _ = execute(statements)
        return ",".join(f"{s.split('=', 1)[0]}={v}" for s, v in zip(statements, values))
    return str(run_program(source))


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
    description = "straight-line program echo a=3;b=a+4;a=b-9: ; answer is what it prints (a=3,b=7,a=-2)"
    why_parallel_is_hard = ("each printed value depends on earlier ones, its digits are jointly determined, "
                            "and its position depends on the widths of all earlier values")

    def __init__(self, min_assign: int = 3, max_assign: int = 5, variables: str = "abc",
                 max_literal: int = 9, max_abs: int = 99, ops: str = "+-", form: str = "echo",
                 operands: str = "chain", signed: bool = False):
        if (not 1 <= min_assign <= max_assign or not variables or set(variables) - set(string.ascii_lowercase)
                or not ops or set(ops) - set("+-*") or max_abs < max_literal or form not in ("echo", "query")
                or operands not in ("chain", "any")):
            raise ValueError("bad prog knobs: need 1 <= min_assign <= max_assign, lowercase variables, "
                             "ops from '+-*', max_abs >= max_literal, form 'echo' or 'query', "
                             "operands 'chain' or 'any'")
        self.min_assign, self.max_assign, self.variables = min_assign, max_assign, variables
        self.max_literal, self.max_abs, self.ops, self.form = max_literal, max_abs, ops, form
        self.operands, self.signed = operands, signed

    def _program(self, rng: random.Random) -> tuple[list[str], dict[str, int]] | None:
        """A random program, or None if some intermediate value leaves the allowed range
        ([-max_abs, max_abs] if signed, else [0, max_abs])."""
        env: dict[str, int] = {}
        statements: list[str] = []
        for i in range(rng.randint(self.min_assign, self.max_assign)):
            target = rng.choice(self.variables)
            if i == 0:
                expr = str(rng.randint(0, self.max_literal))
            else:
                # One operand is always a variable, so each statement extends the dependency chain;
                # "chain" makes it the variable the previous statement assigned, with a literal.
                if self.operands == "chain":
                    var, other = statements[-1][0], str(rng.randint(0, self.max_literal))
                else:
                    var = rng.choice(sorted(env))
                    other = rng.choice(sorted(env)) if rng.random() < 0.5 else str(rng.randint(0, self.max_literal))
                left, right = (var, other) if rng.random() < 0.5 else (other, var)
                expr = f"{left}{rng.choice(self.ops)}{right}"
            env[target] = evaluate(expr, env)
            if not (-self.max_abs if self.signed else 0) <= env[target] <= self.max_abs:
                return None
            statements.append(f"{target}={expr}")
        return statements, env

    def generate(self, rng: random.Random) -> tuple[str, str]:
        while (program := self._program(rng)) is None:
            pass
        statements, env = program
        if self.form == "echo":
            prompt = f"echo {';'.join(statements)}:"
            return prompt, program_output(prompt)
        query = rng.choice(sorted(env))
        return ";".join(statements) + f";{query}?", str(env[query])

    def check(self, prompt: str, output: str) -> bool:
        # The interpreter prints canonical decimals, so string equality also rejects "07" or "-0".
        return output == program_output(prompt)

