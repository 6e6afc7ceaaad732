"""Several gateway processes behind one port (`roost gateway --workers N`).

One gateway process tokenizes, renders templates and records every call on one core; with
many engines behind it that core is the limit. With `--workers N` the process on the port is a
relay: it starts N gateway workers (each a whole `roost gateway` on 127.0.0.1, all recording
into the one store) and forwards each request to one of them, unchanged:

- a session lives on one worker, chosen from its id (`routing.worker_of`), so its token trees
  stay in one process: calls by URL (`/sessions/{id}/...`) go there, calls with only the
  session's key go where the store says that key's session lives;
- `POST /sessions` gets an id chosen by the relay when the body names none, and goes to that
  id's worker;
- control writes that every worker must see (pause, resume, weight version, engines) go to all;
- `/health` and `/metrics` merge all workers' answers; store reads go to any worker.

A worker that dies is started again; while it is down its sessions' calls are answered 503 with
Retry-After, and it reads their records back from the store when it is up, after it has taken the
control writes the others hold (`replay`). Nothing the relay holds is needed to go on: every
record is in the store.
"""
