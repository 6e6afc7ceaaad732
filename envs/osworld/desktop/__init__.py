"""Inside the desktop: the X session (`session`), the control server (`server`, `http_io`,
`commands`, `action_runner`, `screen`, `windows`) and the accessibility tree as OSWorld's XML (`a11y`).

Standard library, pyatspi, python-xlib and PIL only: it runs on the desktop's system python3.
"""
