"""roost.viewer: the trajectory viewer behind `roost view`, a read-only web app over a run folder.

`queries` reads the trajectory store (read-only SQLite, paginated), `run_folder` the rest of a
run folder (metrics, evals, state, the tokenizer), `tokens` lays out a call's token window,
`plots` draws training curves as inline SVG, `templates` and `pages` render HTML, `app` is the
FastAPI app and `cli` the `roost view` command.
"""
