"""The control plane: sessions, rewards, advantages, pause, the training samples of groups (routes,
wire models; `samples_page` and `cursor`: `GET /samples`'s pages and their signed cursor) and the
client the runner and the trainer call it with."""
