from levelfield.cli import main

main()
