from labkit.cli import main

main()
