"""One router per resource; ``create_app`` mounts them."""
