# engine/: cairnd
