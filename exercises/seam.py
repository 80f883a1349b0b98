"""The seam: how a student's function takes the place of the project's.

The project's files call these functions through their modules' namespaces (align.align calls
find_span, ppo.ppo_iteration calls compute_advantages, loss.ppo_loss calls clipped_losses, ...),
so one setattr per name puts another function in every place the method uses it. Nothing in the
core knows about exercises; the checks and `python -m exercises` (__main__.py) call install().
"""
import inspect

import align
import grpo
import guards
import loss
import ppo

# each exercise's functions, and the project module whose function of that name they replace
EXERCISES = {"E1": ("find_span", "span_rewards"), "E2": ("bound_praise",),
             "E3": ("final_scores", "token_rewards"), "E4": ("compute_advantages",),
             "E5": ("clipped_losses",), "E7": ("group_advantages",)}
HOMES = {"find_span": align, "span_rewards": align, "bound_praise": guards,
         "final_scores": ppo, "token_rewards": ppo, "compute_advantages": ppo,
         "clipped_losses": loss, "group_advantages": grpo}


def reference():
    """{name: the project's own function}."""
    return {name: getattr(home, name) for name, home in HOMES.items()}


def written(module):
    """{name: function} of the module's functions that are no longer stubs (a stub's body
    raises NotImplementedError)."""
    return {name: getattr(module, name) for name in HOMES if hasattr(module, name)
            and "raise NotImplementedError" not in inspect.getsource(getattr(module, name))}


def install(functions):
    """Put each function in the place of the project's function of its name. Returns what was
    there before, so that install(install(mine)) puts everything back."""
    unknown = set(functions) - set(HOMES)
    if unknown:
        raise ValueError(f"no exercise writes {', '.join(sorted(unknown))}; "
                         f"the seam knows {', '.join(HOMES)}")
    before = {name: getattr(HOMES[name], name) for name in functions}
    for name, function in functions.items():
        setattr(HOMES[name], name, function)
    return before


def install_student():
    """python -m exercises: the functions written so far in exercises/student.py in
    place of the project's; the rest stay the project's. Returns the line that says which."""
    from exercises import student
    mine = written(student)
    install(mine)
    rest = [name for name in HOMES if name not in mine]
    return (f"exercises: yours: {', '.join(mine) or 'none yet'}; "
            f"the project's: {', '.join(rest) or 'none'}")
