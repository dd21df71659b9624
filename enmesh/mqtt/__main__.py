import sys

from enmesh.mqtt.main import main

sys.exit(main())
