"""The Anthropic Messages wire: request types, blocks to template messages, options, front-end, routes."""
