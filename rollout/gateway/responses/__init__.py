"""The OpenAI Responses wire: request types, input items to template messages, front-end, routes."""
