"""`harness tune`: each framework's fastest configuration found by racing over processes.

`race` is the rule (pure: values in, survivors, drops, leader and verdicts out), `replay` runs it over
a store's recorded processes against the exhaustive answer, `simulation` measures its error rate on
made-up configurations, `live` runs it through the session application layer (docs/tune.md).
"""
