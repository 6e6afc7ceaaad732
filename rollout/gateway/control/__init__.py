"""The control plane: sessions, rewards, advantages, pause (routes, wire models) and the client the runner and the trainer call it with."""
