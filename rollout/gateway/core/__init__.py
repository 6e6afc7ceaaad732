"""The gateway's core: the call pipeline every wire's front-end hands its call to, prompt planning on
the token trees, recording, sessions, and what every wire shares."""
