from bakeoff.cli import main

raise SystemExit(main())
